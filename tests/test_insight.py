"""L1: `insight rebuild` stays within its limits on a big memory; `insight check` lints."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from memctl.agent import insight
from memctl.core.config import Layout
from conftest import MEMORY_EXAMPLE

GENERIC = MEMORY_EXAMPLE
RULES = (
    "[RULES]\n"
    "1. Verify before asserting; never trust a summary line, open the source\n"
    "2. Long-running daemons cache credentials: restart after rotation  \n"  # trailing blanks kept
    "3. 文件只打补丁，不要整体覆盖\n"
    "4. Never store secrets here"  # no final newline: kept as it is
)
GLOBAL_MEM = """# [Global Memory - L2]

## [DEPLOY]
host: app-01.internal | user: deploy

## [PROXY]
http_proxy: 127.0.0.1:7890

## [NAS]
share: nas-01 | mount: /mnt/media

## [BACKUP]
host: bk-02 | log: /var/log/nightly-backup.log
"""


def _fake_key() -> str:
    return "gh" + "p_" + "Zx9" * 12


@pytest.fixture
def big_memory(run, root) -> Path:
    assert run("init", root=root).returncode == 0
    (root / "global_mem.txt").write_text(GLOBAL_MEM, encoding="utf-8")
    rng = random.Random(5)
    for i in range(1000):
        kind = i % 10
        if kind == 0:
            (root / f"tool_{i:04d}.py").write_text("print('x')\n")
        elif kind == 1:
            (root / f"folder_{i:04d}").mkdir()
        else:
            (root / f"task_{i:04d}_sop.md").write_text(f"# task {i}\n")
    (root / "deploy_sop.md").write_text("# deploy\n")
    topics = ["deploy", "backup", "proxy", "nas", "部署流程", "invoice ocr"] + [f"topic {n}" for n in range(300)]
    with open(root / "long_term.jsonl", "w", encoding="utf-8") as handle:
        for i in range(10_000):
            topic = topics[min(int(rng.expovariate(0.05)), len(topics) - 1)]
            entry = {"id": f"m{i:012x}", "type": "event", "topic": topic, "text": f"fact {i} about {topic}",
                     "refs": rng.randint(0, 9), "created": "2026-01-01T00:00:00"}
            handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
    # the planted key must never reach L1, whatever the topic ranking does
    with open(root / "long_term.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"id": "mkey", "type": "event", "topic": "token " + _fake_key(),
                                 "text": "x", "refs": 10_000}) + "\n")
    (root / f"{_fake_key()}.md").write_text("x\n")
    (root / "global_mem_insight.txt").write_bytes(b"# [Global Memory Insight]\nold\n\n" + RULES.encode("utf-8"))
    return root


def test_rebuild_on_a_big_memory_stays_within_limits(run, big_memory):
    root = big_memory
    result = run("insight", "rebuild", "--json", root=root)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    data = (root / "global_mem_insight.txt").read_bytes()
    text = data.decode("utf-8")
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    assert lines <= 30 and len(data) <= 1024, text
    assert (report["lines"], report["bytes"]) == (lines, len(data))
    assert report["total"]["l3"] >= 1001
    # the user's rules, byte for byte, at the end
    assert data.endswith(b"\n" + RULES.encode("utf-8"))
    # shape: title, pointer line, layer lines, scene lines for the most referenced topics
    assert text.startswith("# [Global Memory Insight]\n")
    assert "\nL2: DEPLOY | PROXY | NAS | BACKUP\n" in text
    assert "\nL3: " in text and "more (ls)" in text
    assert "\nL4: L4_raw_sessions/" in text
    assert "deploy: deploy_sop(" in text
    # no secret, no ghost, and check agrees
    assert _fake_key() not in text and "REDACTED" not in text
    assert insight.check(Layout(root)) == []
    assert run("insight", "check", root=root).returncode == 0


def test_every_pointer_exists(run, big_memory):
    root = big_memory
    assert run("insight", "rebuild", root=root).returncode == 0
    text = (root / "global_mem_insight.txt").read_text(encoding="utf-8")
    l3 = [item.split("(")[0].strip() for _, item in insight._items_of(text, "L3") if not item.startswith("+")]
    assert len(l3) >= 3
    for name in l3:
        assert (root / name.rstrip("/")).exists() or (root / f"{name}.md").is_file(), name
    headings = (root / "global_mem.txt").read_text()
    for _, section in insight._items_of(text, "L2"):
        assert f"## [{section}]" in headings


def test_rebuild_is_stable_and_dry_run_writes_nothing(run, big_memory):
    root = big_memory
    before = (root / "global_mem_insight.txt").read_bytes()
    dry = run("insight", "rebuild", "--dry-run", root=root)
    assert dry.returncode == 0
    assert (root / "global_mem_insight.txt").read_bytes() == before
    assert run("insight", "rebuild", root=root).returncode == 0
    first = (root / "global_mem_insight.txt").read_bytes()
    assert dry.stdout == first
    assert run("insight", "rebuild", root=root).returncode == 0
    assert (root / "global_mem_insight.txt").read_bytes() == first
    # counts written from L5 are recounted, not kept as if a person had written them
    with open(root / "long_term.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"id": "mnew", "type": "event", "topic": "deploy", "text": "x", "refs": 5000}) + "\n")
    assert run("insight", "rebuild", root=root).returncode == 0
    third = (root / "global_mem_insight.txt").read_text(encoding="utf-8")
    assert third.count("deploy: deploy_sop(") == 1 and "deploy: deploy_sop(7220 refs)" in third


def test_rebuild_of_the_genericagent_example_keeps_rules_and_annotations(run, root):
    assert run("init", root=root).returncode == 0
    shutil.copy(GENERIC / "global_mem.txt", root / "global_mem.txt")
    shutil.copy(GENERIC / "global_mem_insight.txt", root / "global_mem_insight.txt")
    for name in ("deploy_sop.md", "backup_restore_sop.md", "notes_digest.py"):
        (root / name).write_text("x\n")
    assert run("insight", "rebuild", root=root).returncode == 0
    new = (root / "global_mem_insight.txt").read_bytes()
    old = (GENERIC / "global_mem_insight.txt").read_bytes()
    assert new.endswith(old[old.index(b"[RULES]"):])
    assert b"backup_restore_sop(bk-02 403)" in new  # a person's note survives
    assert b"memory_cleanup_sop" not in new  # it does not exist here
    # hand-written scene lines stay as written, in place, even one whose file is gone: a person
    # wrote it, so `insight check` (and verify, as a warning) reports it instead of dropping it
    for line in old.decode().splitlines():
        if line.startswith(("Deploy/CI", "Notes/digest", "# [Global")):
            assert line.encode() + b"\n" in new
    check = run("insight", "check", root=root)
    assert check.returncode == 1 and b"scheduled_task_sop" in check.stdout and check.stdout.count(b"\n") == 1


def test_check_flags_a_31_line_file(run, root):
    run("init", root=root)
    lines = ["# [Global Memory Insight]", "Read L2 or ls ../memory/ for L3 when needed"]
    lines += [f"note {n}" for n in range(29)]
    (root / "global_mem_insight.txt").write_text("\n".join(lines) + "\n")
    result = run("insight", "check", root=root)
    assert result.returncode == 1
    out = result.stdout.decode().splitlines()
    assert out == [f"{root / 'global_mem_insight.txt'}:31: lines: 31 lines; the limit is 30"]


def test_check_flags_a_ghost_pointer(run, root):
    run("init", root=root)
    (root / "real_sop.md").write_text("x\n")
    (root / "global_mem.txt").write_text("## [DEPLOY]\nx: y\n")
    (root / "global_mem_insight.txt").write_text(
        "# [Global Memory Insight]\nRead L2 or ls ../memory/ for L3 when needed\n"
        "L2: DEPLOY | GHOSTSECTION\nL3: real_sop | ghost_sop(gone)\nL4: L4_raw_sessions/ sessions\n\n"
        "Deploy: real_sop | Old: vanished.py\n"
    )
    result = run("insight", "check", root=root)
    assert result.returncode == 1
    out = result.stdout.decode()
    assert "ghost_sop" in out and "GHOSTSECTION" in out and "vanished.py" in out
    assert "real_sop'" not in out
    assert len(out.splitlines()) == 3


def test_check_flags_a_planted_key(run, root):
    run("init", root=root)
    (root / "global_mem_insight.txt").write_text(
        "# [Global Memory Insight]\nRead L2 or ls ../memory/ for L3 when needed\n\n[RULES]\n"
        f"1. deploy with {_fake_key()}\n"
    )
    result = run("insight", "check", "--json", root=root)
    assert result.returncode == 1
    (finding,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert (finding["line"], finding["kind"]) == (5, "secret")
    assert _fake_key() not in result.stdout.decode() + result.stderr.decode()


def test_rebuild_redacts_a_secret_in_rules(run, root):
    run("init", root=root)
    (root / "global_mem_insight.txt").write_text(f"# [Global Memory Insight]\n\n[RULES]\n1. key {_fake_key()}\n")
    result = run("insight", "rebuild", root=root)
    assert result.returncode == 0
    assert b"redacted" in result.stderr
    assert _fake_key() not in (root / "global_mem_insight.txt").read_text()
    assert run("insight", "check", root=root).returncode == 0


def test_rules_too_long_are_kept_with_a_warning_not_truncated(run, root):
    run("init", root=root)
    rules = "[RULES]\n" + "".join(f"{n}. rule\n" for n in range(40))
    (root / "global_mem_insight.txt").write_text("# [Global Memory Insight]\n\n" + rules)
    result = run("insight", "rebuild", root=root)
    assert result.returncode == 0
    assert b"over its 30 lines" in result.stderr and b"they are kept" in result.stderr
    assert (root / "global_mem_insight.txt").read_text().endswith(rules)


def test_check_without_a_file_is_an_error(run, root):
    run("init", root=root)
    result = run("insight", "check", root=root)
    assert result.returncode == 2
    assert b"insight rebuild" in result.stderr


def test_rebuild_does_not_create_a_memory_where_there_is_none(run, root):
    result = run("insight", "rebuild", root=root)
    assert result.returncode == 2 and f"run memctl init {root}".encode() in result.stderr
    assert not root.exists()
