"""Nothing acknowledged is lost when a write is cut: every N-th write of a command, torn
(half the buffer, then SIGKILL) or refused (ENOSPC), through MEMCTL_FAULT_WRITE.

For each command and each N until the command no longer reaches an N-th write: the fault,
then the same command again, then `verify --repair` and `verify` (exit 0), then: every
entry acknowledged before the fault and the rerun's entry are present exactly once, every
JSON line parses (torn fragments are in .memctl/torn/), and search finds the new fact.

Each command's first torn write is cut in the installed `memctl`; the other cuts, and the
commands around them, run in children forked from a pre-imported interpreter
(tests/forkserver.py). Each command's folder before it runs is built once for both kinds.

For `archive` the hooked writes are the history and manifest appends (`append_durably`) and
the atomic writes; its zips are written by zipfile, whose kill points MEMCTL_FAULT_AFTER
covers in test_archive_safety.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

import pytest

from durability_helpers import (ENV, OLD, entry, every_line_parses, fresh_copy, l5, l6, lines_of, one_line,
                                present_once, repaired_and_verified, seed, texts_in_l5)
from memctl.core.config import init_root
from memctl.l4 import loggen
from memctl.longterm.refs import record_refs

MAX_WRITES = 40  # far more than any command here makes: a loop that does not end is a failure
TOTALS = {"faults": 0, "entries": 0, "lost": 0}


@dataclass
class Scenario:
    name: str
    build: Callable  # (run, root) -> context dict, on a fresh root
    args: Callable  # context -> the command's arguments
    check: Callable  # (run, root, context, rerun) -> entries checked
    done_already: tuple[bytes, ...] = ()  # a rerun's exit-2 message meaning "it was done"
    env: dict = field(default_factory=lambda: dict(ENV))


def _remember(run, root, text, *args) -> str:
    done = run("remember", text, *args, root=root, env=ENV)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


def _base(run, root) -> dict:
    assert run("init", root=root).returncode == 0
    facts = {"the staging host is bk-07": ("-t", "lesson"), "deploys go through jenkins": ("-t", "decision"),
             "the wiki moved to notion": ("-t", "event")}
    return {"ack": {_remember(run, root, text, *args): text for text, args in facts.items()}}


def _found(run, root, query: str, text: str, layers: str = "L5,L6") -> None:
    hits = run("search", query, "--layers", layers, root=root)
    assert hits.returncode == 0 and text.encode() in hits.stdout, (query, hits.stdout, hits.stderr)


# --- remember


NEW_FACT = "the backup window opens at 02:00 UTC"


def check_remember(run, root, context, rerun) -> int:
    new_id = rerun.stdout.decode().strip()
    assert texts_in_l5(root, NEW_FACT) == 1
    _found(run, root, "backup window", NEW_FACT)
    return present_once(root, {**context["ack"], new_id: NEW_FACT})


# --- remember (supersede)


def build_supersede(run, root) -> dict:
    context = _base(run, root)
    context["old"] = _remember(run, root, "editor is vim", "-t", "preference", "--topic", "editor")
    context["ack"][context["old"]] = "editor is vim"
    return context


def check_supersede(run, root, context, rerun) -> int:
    editors = [e for e in l5(root) if e["type"] == "preference" and e.get("topic") == "editor"]
    assert [e["text"] for e in editors] == ["editor is helix"]
    assert context["old"] not in {e["id"] for e in l5(root)}
    _found(run, root, "helix", "editor is helix")
    return present_once(root, {**context["ack"], editors[0]["id"]: "editor is helix"})


# --- import


IMPORTED = ["met Ana about the invoice pipeline", "the invoice OCR step runs nightly",
            "met Ana about the invoice pipeline", "vendor portal password rotates monthly"]


def build_import(run, root) -> dict:
    context = _base(run, root)
    source = root.parent / f"{root.name}-items.jsonl"
    lines = [{"text": IMPORTED[0], "session": "s1"}, {"text": IMPORTED[1], "date": "2026-05-02"},
             {"text": IMPORTED[2], "session": "s1"}, {"id": "src-1", "text": IMPORTED[3]}]
    source.write_text("".join(json.dumps(x) + "\n" for x in lines))
    context["file"] = str(source)
    return context


def check_import(run, root, context, rerun) -> int:
    texts = [e["text"] for e in l6(root) if e.get("reason") == "imported"]
    assert sorted(texts) == sorted(IMPORTED), texts  # the repeated line twice, as in the file; nothing doubled
    again = run("import", context["file"], root=root)
    assert again.returncode == 0 and len([e for e in l6(root) if e.get("reason") == "imported"]) == 4
    _found(run, root, "OCR nightly", IMPORTED[1])
    return present_once(root, context["ack"]) + len(texts)


# --- forget and restore


def check_forget(run, root, context, rerun) -> int:
    gone = context["target"]
    assert gone not in {e["id"] for e in l5(root)}
    assert [e for e in l6(root) if e["id"] == gone][-1]["reason"] == "forgotten"
    _found(run, root, "staging host", "the staging host is bk-07")
    return present_once(root, context["ack"])


def build_forget(run, root) -> dict:
    context = _base(run, root)
    context["target"] = next(i for i, t in context["ack"].items() if t == "the wiki moved to notion")
    return context


def build_restore(run, root) -> dict:
    context = build_forget(run, root)
    assert run("forget", context["target"], root=root, env=ENV).returncode == 0
    return context


def check_restore(run, root, context, rerun) -> int:
    assert [e["id"] for e in l5(root)].count(context["target"]) == 1
    _found(run, root, "wiki notion", "the wiki moved to notion")
    return present_once(root, context["ack"])


# --- dream and dream --undo


def dream_entries():
    entries = [entry(f"n{i}", f"note number {i} about topic {i * 7919 % 1000}", "lesson") for i in range(12)]
    entries += [entry("a", "Always run the migrations before deploying the api", "case", source="s1"),
                entry("b", "always run migrations before deploying the API!", "case", source="s2"),
                entry("c", "Always run the migration before deploying the api", "case", source="s3"),
                entry("old", "deployed v0.9", "event", created=OLD),
                entry("v1", "deploys via jenkins", "decision"),
                entry("v2", "deploys via actions", "decision", supersedes=["v1"]),
                entry("m1", "bk-02 backs up", "lesson", topic="bk-02", confidence=8),
                entry("m2", "bk-02 has 64 GB", "lesson", topic="bk-02", confidence=8)]
    return entries


def build_dream(run, root) -> dict:
    init_root(root)
    entries = dream_entries()
    seed(root, entries)
    record_refs(root / ".memctl" / "refs.log", ["n1", "n2", "n1"], "2026-05-31T00:00:00")
    return {"ack": {e.id: e.text for e in entries}}


def check_dream(run, root, context, rerun) -> int:
    active = {e["id"]: e for e in l5(root)}
    # the references were folded once, whatever step the kill hit
    assert (active["n1"]["refs"], active["n2"]["refs"]) == (2, 1)
    assert {"a", "b", "c", "old", "v1"}.isdisjoint(active)  # the rerun finished the dream
    _found(run, root, "note number 4", "note number 4")
    ack = context["ack"]
    departed = {}
    for line in l6(root):
        departed.setdefault(line["id"], set()).add(line["text"])
    for entry_id, text in ack.items():
        assert entry_id in active or text in departed.get(entry_id, ()), f"{entry_id} lost"
    ids = [e["id"] for e in l5(root)]
    assert len(ids) == len(set(ids))
    return len(ack)


def build_undo(run, root) -> dict:
    context = build_dream(run, root)
    context["l5"] = (root / "long_term.jsonl").read_bytes()
    context["l6"] = (root / "archive.jsonl").read_bytes() if (root / "archive.jsonl").exists() else b""
    done = run("dream", "--force", "--json", root=root, env=ENV)
    assert done.returncode == 0, done.stderr
    context["run"] = json.loads(done.stdout)["run"]
    return context


def check_undo(run, root, context, rerun) -> int:
    assert (root / "long_term.jsonl").read_bytes() == context["l5"]
    assert (root / "archive.jsonl").read_bytes() == context["l6"]
    undone = [r for r in lines_of(root / "dream_log.jsonl") if r.get("op") == "undo"]
    assert len(undone) == 1 and undone[0]["of"] == context["run"]
    _found(run, root, "note number 4", "note number 4")
    return present_once(root, context["ack"])


# --- task done


def build_task(run, root) -> dict:
    context = _base(run, root)
    saved = run("task", "save", "rotate-keys", root=root, input=json.dumps({"summary": "rotated the bk-02 keys"}).encode(),
                env=ENV)
    assert saved.returncode == 0, saved.stderr
    return context


def check_task(run, root, context, rerun) -> int:
    cases = [e for e in l5(root) if e.get("source") == "task:rotate-keys"]
    assert len(cases) == 1 and "rotated the bk-02 keys" in cases[0]["text"]
    assert not (root / "working" / "rotate-keys.json").exists()
    _found(run, root, "rotated keys", "rotated the bk-02 keys")
    return present_once(root, {**context["ack"], cases[0]["id"]: cases[0]["text"]})


# --- archive


def build_archive(run, root) -> dict:
    assert run("init", root=root).returncode == 0
    raw_dir = root.parent / "temp" / "model_responses"
    raw_dir.mkdir(parents=True)
    rng = random.Random(5)
    originals = {}
    for number, day in enumerate((3, 4), start=1):
        data = loggen.format_a(datetime(2026, 4, day, 9, 0), 4, rng, 300, request=f"rotate the keys of bk-0{day}")
        path = raw_dir / f"model_responses_{number}.txt"
        path.write_text(data)
        old = time.time() - 3 * 86400
        os.utime(path, (old, old))
        originals[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"ack": {}, "originals": originals}


def check_archive(run, root, context, rerun) -> int:
    records = {r["sha256"]: r for r in lines_of(root / "L4_raw_sessions" / "manifest.jsonl")}
    raw_dir = root.parent / "temp" / "model_responses"
    for name, sha in context["originals"].items():
        if (raw_dir / name).exists():
            assert hashlib.sha256((raw_dir / name).read_bytes()).hexdigest() == sha
            continue
        assert sha in records, f"{name} is neither raw nor archived"
        shown = run("show", "--raw", records[sha]["name"], root=root)
        assert shown.returncode == 0 and hashlib.sha256(shown.stdout).hexdigest() == sha
    assert len(records) == len(context["originals"])
    _found(run, root, "rotate keys bk-04", "bk-04", "L4")
    return len(records)


SCENARIOS = [
    Scenario("remember", _base, lambda c: ["remember", NEW_FACT, "-t", "event"], check_remember),
    Scenario("supersede", build_supersede, lambda c: ["remember", "editor is helix", "-t", "preference", "--topic",
                                                      "editor"], check_supersede),
    Scenario("import", build_import, lambda c: ["import", c["file"]], check_import),
    Scenario("forget", build_forget, lambda c: ["forget", c["target"]], check_forget, (b"not active",)),
    Scenario("restore", build_restore, lambda c: ["restore", c["target"]], check_restore, (b"already active",)),
    Scenario("dream", build_dream, lambda c: ["dream", "--force"], check_dream),
    Scenario("undo", build_undo, lambda c: ["dream", "--undo", c["run"]], check_undo, (b"already undone",)),
    Scenario("task-done", build_task, lambda c: ["task", "done", "rotate-keys"], check_task, (b"no task",)),
    Scenario("archive", build_archive, lambda c: ["archive", "--keep-newest", "0"], check_archive, env={}),
]


@pytest.fixture(scope="module")
def built(forked, tmp_path_factory):
    """scenario -> (its folder before the command, its context), built once for both kinds of fault."""
    cache = {}

    def build(scenario):
        if scenario.name not in cache:
            base = tmp_path_factory.mktemp(f"base-{scenario.name}")
            cache[scenario.name] = base, scenario.build(forked, base / "memory")
        return cache[scenario.name]

    return build


@pytest.mark.parametrize("kind", ["torn", "enospc"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_every_cut_write_of_a_command_loses_nothing(run, forked, built, tmp_path, scenario, kind):
    base, context = built(scenario)
    args = scenario.args(context)
    faults = checked = 0
    for number in range(1, MAX_WRITES + 1):
        # the first torn write of each command goes through the installed `memctl`, the other
        # cuts through children forked from an interpreter that has imported memctl already
        # (tests/forkserver.py): real processes, SIGKILLed for real, without ~0.5 s of imports each
        runner = run if (number, kind) == (1, "torn") else forked
        root = fresh_copy(base, tmp_path / f"{kind}-{number}") / "memory"
        hit = runner(*args, root=root, env={**scenario.env, "MEMCTL_FAULT_WRITE": f"{number}:{kind}"})
        if hit.returncode == 0:
            break  # the command makes fewer writes than this
        faults += 1
        if kind == "torn":
            assert hit.returncode == -9, (number, hit.returncode, hit.stderr)
        else:
            assert hit.returncode == 2, (number, hit.stderr)
            assert "nothing was written" in one_line(hit.stderr)
        rerun = runner(*args, root=root, env=scenario.env)
        assert rerun.returncode == 0 or (rerun.returncode == 2 and any(m in rerun.stderr for m in scenario.done_already)), \
            (number, rerun.returncode, rerun.stderr)
        if rerun.returncode != 0:
            rerun = hit  # nothing new to find in its output
        repaired_and_verified(runner, root)
        every_line_parses(root)
        checked += scenario.check(runner, root, context, rerun)
    else:
        pytest.fail(f"{scenario.name} still failed at write {MAX_WRITES}")
    assert faults >= 1, f"{scenario.name}: no write was hooked"
    TOTALS["faults"] += faults
    TOTALS["entries"] += checked
    print(f"\n{scenario.name} [{kind}]: faults injected {faults}, entries checked {checked}, lost 0; "
          f"running total: faults {TOTALS['faults']}, entries {TOTALS['entries']}, lost {TOTALS['lost']}")


def test_a_torn_tail_is_moved_aside_never_glued_onto(run, root):
    assert run("init", root=root).returncode == 0
    first = _remember(run, root, "the sky is blue today", "-t", "event")
    with open(root / "long_term.jsonl", "ab") as handle:
        handle.write(b'{"id": "half", "text": "a fact cut in the mid')
    second = _remember(run, root, "grass is green always", "-t", "event")
    assert [e["id"] for e in l5(root)] == [first, second]
    [aside] = (root / ".memctl" / "torn").iterdir()
    assert aside.read_bytes() == b'{"id": "half", "text": "a fact cut in the mid'
    assert aside.name.startswith("long_term.jsonl.")
    assert aside.stat().st_mode & 0o777 == 0o600


def test_readers_never_parse_a_torn_last_line(run, root):
    assert run("init", root=root).returncode == 0
    _remember(run, root, "the build host is bk-02", "-t", "event")
    # a whole entry without its newline: the write of it was never acknowledged
    with open(root / "long_term.jsonl", "ab") as handle:
        handle.write(json.dumps({"id": "mtorn", "text": "the build host is bk-02!", "type": "event"}).encode())
    found = run("search", "build host", "--json", root=root)
    assert b"mtorn" not in found.stdout
    again = run("remember", "the build host is bk-02!", "-t", "event", root=root, env=ENV)
    assert again.returncode == 0, again.stderr  # a near-duplicate of the real line, not of the torn one
    assert "mtorn" not in {e["id"] for e in l5(root)}


def test_verify_repair_quarantines_unparseable_lines_and_reports_it(run, root):
    assert run("init", root=root).returncode == 0
    keep = _remember(run, root, "the build host is bk-02", "-t", "event")
    path = root / "long_term.jsonl"
    path.write_bytes(path.read_bytes() + b"{not json}\n" + b'{"id": "x"}\n')
    (root / ".long_term.jsonl.abc123.tmp").write_bytes(b"half a rewrite")
    assert run("verify", root=root).returncode == 3  # an integrity error
    repaired = run("verify", "--repair", root=root)
    assert repaired.returncode == 0, repaired.stderr
    assert b"2 unparseable lines" in repaired.stderr and b"temp file" in repaired.stderr
    assert [e["id"] for e in l5(root)] == [keep]
    aside = b"".join(p.read_bytes() for p in (root / ".memctl" / "torn").iterdir())
    assert b"{not json}" in aside and b'{"id": "x"}' in aside
    assert not (root / ".long_term.jsonl.abc123.tmp").exists()
    assert run("verify", root=root).returncode == 0
