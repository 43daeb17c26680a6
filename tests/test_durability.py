"""The smaller promises of issue 11: duplicate ids never resolved by dropping a text, an
import of the same file twice adds nothing, secrets redacted at rest by `remember`, stale
temp files swept by the writer that owns them, a cut-off step finished by the next writer."""

from __future__ import annotations

import json
import os
import time

from durability_helpers import ENV, entry, l5, l6, lines_of, seed
from memctl.core.config import init_root

TWIN = {"id": "mtwin", "type": "event", "confidence": 5}


def _twins(root) -> None:
    init_root(root)
    path = root / "long_term.jsonl"
    path.write_text("".join(json.dumps({**TWIN, "text": text}) + "\n"
                            for text in ("the first text of mtwin", "the second text of mtwin")))


def test_forget_refuses_an_id_on_two_lines_naming_it(run, root):
    _twins(root)
    before = (root / "long_term.jsonl").read_bytes()
    refused = run("forget", "mtwin", root=root)
    assert refused.returncode == 2 and b"mtwin is on more than one line" in refused.stderr
    assert refused.stderr.count(b"\n") == 1
    assert (root / "long_term.jsonl").read_bytes() == before and l6(root) == []


def test_a_dream_leaves_both_lines_of_a_duplicate_id(run, root):
    init_root(root)
    seed(root, [entry("keep", "the build host is bk-02", "lesson"),
                entry("mtwin", "deployed v0.9", "event", created="2026-01-01T10:00:00")])
    with open(root / "long_term.jsonl", "a") as handle:
        handle.write(json.dumps({**TWIN, "text": "deployed v1.0", "created": "2026-01-01T10:00:00"}) + "\n")
    done = run("dream", "--force", root=root, env=ENV)
    assert done.returncode == 0, done.stderr
    assert sorted(e["text"] for e in l5(root) if e["id"] == "mtwin") == ["deployed v0.9", "deployed v1.0"]


def test_remember_refuses_to_raise_seen_on_a_duplicate_id(run, root):
    _twins(root)
    refused = run("remember", "the first text of mtwin", "-t", "event", root=root)
    assert refused.returncode == 2 and b"mtwin" in refused.stderr
    assert [e["text"] for e in l5(root)] == ["the first text of mtwin", "the second text of mtwin"]


def test_verify_repair_reports_a_duplicate_id_and_leaves_it(run, root):
    _twins(root)
    repaired = run("verify", "--repair", root=root)
    assert b"id mtwin is on more than one line" in repaired.stderr
    assert len(l5(root)) == 2


def test_importing_the_same_file_twice_adds_nothing(run, root, tmp_path):
    assert run("init", root=root).returncode == 0
    source = tmp_path / "items.jsonl"
    source.write_text("".join(json.dumps(x) + "\n" for x in [
        {"text": "ok", "session": "s1"}, {"text": "ok", "session": "s1"}, {"text": "the invoice is late"},
        {"id": "src-9", "text": "met Ana"}]))
    first = run("import", source, "--json", root=root)
    assert first.returncode == 0 and json.loads(first.stdout)["imported"] == 4
    second = run("import", source, "--json", root=root)
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout)
    assert (report["imported"], report["already"], report["bad_lines"]) == (0, 4, 0)
    assert sorted(e["text"] for e in l6(root)) == ["met Ana", "ok", "ok", "the invoice is late"]
    journal = lines_of(root / ".memctl" / "imports.jsonl")
    assert [j["imported"] for j in journal] == [4, 0] and journal[0]["sha256"] == journal[1]["sha256"]
    clash = tmp_path / "clash.jsonl"
    clash.write_text(json.dumps({"id": "src-9", "text": "another text"}) + "\n")
    refused = run("import", clash, root=root)
    assert refused.returncode == 2 and b"src-9" in refused.stderr  # a taken id with another text is still bad


def test_remember_redacts_secrets_at_rest_unless_told_to_keep_them(run, root):
    assert run("init", root=root).returncode == 0
    key = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    done = run("remember", f"the CI token is {key}", "-t", "event", root=root)
    assert done.returncode == 0, done.stderr
    assert key.encode() not in (root / "long_term.jsonl").read_bytes()
    (root / "memctl.toml").write_text("[redaction]\nkeep_secrets_at_rest = true\n")
    kept = run("remember", f"the deploy token is {key}", "-t", "event", root=root)
    assert kept.returncode == 0, kept.stderr
    assert key.encode() in (root / "long_term.jsonl").read_bytes()


def test_a_writer_sweeps_its_own_stale_temp_files_only(run, root):
    assert run("init", root=root).returncode == 0
    stale = root / ".long_term.jsonl.k1ll3d.tmp"
    foreign = root / ".notes.txt.k1ll3d.tmp"
    newer = root / ".archive.jsonl.l1v3.tmp"
    for path in (stale, foreign, newer):
        path.write_bytes(b"half")
    hour_ago = time.time() - 3600
    os.utime(stale, (hour_ago, hour_ago))
    os.utime(foreign, (hour_ago, hour_ago))
    later = time.time() + 3600  # written after this writer started: another run's, not stale
    os.utime(newer, (later, later))
    assert run("remember", "the build host is bk-02", "-t", "event", root=root).returncode == 0
    assert not stale.exists() and foreign.exists() and newer.exists()


def test_a_dream_step_cut_off_before_its_l5_rewrite_is_rolled_back_by_the_next_writer(run, root):
    init_root(root)
    seed(root, [entry("old", "deployed v0.9", "event", created="2026-01-01T10:00:00"),
                entry("keep", "the build host is bk-02", "lesson")])
    l5_before = (root / "long_term.jsonl").read_bytes()
    # writes: 1 start record, 2 the step's journal, 3 the L6 copy, 4 the audit record, 5 L5
    killed = run("dream", "--force", root=root, env={**ENV, "MEMCTL_FAULT_WRITE": "5:torn"})
    assert killed.returncode == -9
    assert [e["id"] for e in l6(root)] == ["old"]  # the L6 copy is in, L5 was never replaced
    assert run("remember", "grass is green", "-t", "event", root=root, env=ENV).returncode == 0
    assert l6(root) == []  # rolled back: L5 still holds the entry, so its copy goes
    assert (root / "long_term.jsonl").read_bytes().startswith(l5_before)
    assert not any(r.get("op") == "archive" for r in lines_of(root / "dream_log.jsonl"))
    assert not list((root / ".memctl" / "journal").glob("*.json"))
