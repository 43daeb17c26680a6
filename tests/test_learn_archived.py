"""`memctl learn` over archived sessions (issue 29): the write link run over L4, resumable after
SIGKILL at any step, idempotent, with the logged tool calls folded into the collector."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from conftest import SAMPLES
from ga_checkout import REAL_WRITER, make_checkout

ENV = {"MEMCTL_NOW": "2026-12-05T10:00:00"}
FAILING_LOG = "model_responses_900001.txt"


def _failing_session() -> bytes:
    """A format B session whose three `web_fetch` calls fail the same way (no call ids in B)."""
    from memctl.l4 import loggen

    stamp = datetime(2026, 4, 20, 9, 0, 0)
    out = [loggen.entry("Prompt", stamp, "=== USER ===\nI am allergic to peanuts. Fetch the three reports.\n"
                                         "=== ASSISTANT ===\n")]
    for turn in range(1, 4):
        call = json.dumps({"name": "web_fetch", "arguments": {"url": f"https://x.example/r{turn}.pdf"}})
        out.append(loggen.entry("Response", stamp.replace(minute=turn), f"<summary>fetch {turn}</summary>\n"
                                                                      f"<tool_use>{call}</tool_use>", "m"))
        result = json.dumps({"status": "error", "msg": f"file too large: {20 + turn}000000 bytes"})
        out.append(loggen.entry("Prompt", stamp.replace(minute=turn, second=30),
                                f"=== USER ===\n<tool_result>{result}</tool_result>\n=== ASSISTANT ===\n"))
    out.append(loggen.entry("Response", stamp.replace(minute=5), "The reports are too large to fetch.", "m"))
    return "".join(out).encode()


@pytest.fixture
def archived(tmp_path, run) -> Path:
    """A memory whose L4 holds the real-writer logs, the two samples and a failing session."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for path in [*REAL_WRITER.glob("model_responses_*.txt"), *SAMPLES.glob("model_responses_*.txt")]:
        shutil.copyfile(path, raw / path.name)
    (raw / FAILING_LOG).write_bytes(_failing_session())
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    done = run("archive", raw, "--min-age", "0s", "--keep-newest", "0", root=root)
    assert done.returncode == 0 and b"10 new sessions" in done.stderr, done.stderr
    return root


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _state(root: Path) -> tuple:
    """What a learn run leaves that must not depend on where earlier runs were killed."""
    # (a tool lesson's id is new each time it is written, as every remembered entry's)
    l5 = sorted((e["id"] if e["type"] != "tool" else "", e["type"], e["text"], e.get("seen", 1))
                for e in _lines(root / "long_term.jsonl"))
    l6 = sorted(e["id"] for e in _lines(root / "archive.jsonl") if e["type"] != "tool")
    calls = sorted((e["tool"], e.get("call", ""), e["ok"]) for e in _lines(root / "tool_usage.jsonl"))
    learned = sorted(e["sha256"] for e in _lines(root / ".memctl" / "learned_sessions.jsonl"))
    return l5, l6, calls, learned


def _learn(run, root: Path, *args: str, env: dict | None = None):
    return run("learn", "--json", *args, root=root, env={**ENV, **(env or {})})


def test_learn_extracts_every_archived_session_once_with_provenance(archived, run):
    first = _learn(run, archived)
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert report["sessions"] == report["learned"] == 10 and report["errors"] == []
    assert report["actions"]["added"] > 0 and report["tool_events"] > 0
    l5 = _lines(archived / "long_term.jsonl")
    names = {r["name"] for r in _lines(archived / "L4_raw_sessions" / "manifest.jsonl")}
    assert all(s["session"] in names for e in l5 if e["type"] != "tool" for s in e["sources"])
    [failing] = [r["name"] for r in _lines(archived / "L4_raw_sessions" / "manifest.jsonl") if r["source"] == FAILING_LOG]
    [peanuts] = [e for e in l5 if "peanut" in e["text"]]
    assert peanuts["sources"][0]["session"] == failing

    tools = {row["tool"]: row for row in map(json.loads, run("tools", "--json", root=archived).stdout.splitlines())}
    assert (tools["web_fetch"]["calls"], tools["web_fetch"]["failures"]) == (3, 3)
    assert tools["code_run"]["calls"] >= 5 and tools["code_run"]["failures"] == 0
    [lesson] = [e for e in l5 if e["type"] == "tool"]
    assert lesson["topic"] == "web_fetch" and lesson["source"] == f"tool_usage: {failing}"

    files = {p: p.read_bytes() for p in (archived / "long_term.jsonl", archived / "tool_usage.jsonl")}
    second = _learn(run, archived)
    assert json.loads(second.stdout)["learned"] == 0 and json.loads(second.stdout)["learned_before"] == 10
    (archived / ".memctl" / "learned_sessions.jsonl").unlink()  # even without its checkpoints
    third = json.loads(_learn(run, archived).stdout)
    assert third["learned"] == 10 and set(third["actions"]) == {"done"} and third["tool_events"] == 0
    assert {p: p.read_bytes() for p in files} == files  # nothing written twice


def test_a_learn_killed_at_any_step_finishes_on_the_next_run_writing_nothing_twice(archived, run, tmp_path):
    clean = tmp_path / "clean"
    shutil.copytree(archived, clean)
    assert _learn(run, clean).returncode == 0
    expected = _state(clean)

    kills = 0
    for label in ("learn: session routed", "learn: session tools"):
        killed = _learn(run, archived, env={"MEMCTL_FAULT_AT": label})
        assert killed.returncode == -9, killed.stderr
        kills += 1
    for after in (1, 2, 3, 5, 8, 13):  # the checkpoints of a run: appends, routing, tools, checkpoint lines
        killed = _learn(run, archived, env={"MEMCTL_FAULT_AFTER": str(after)})
        assert killed.returncode in (-9, 0), killed.stderr
        kills += killed.returncode == -9
    assert kills >= 6 and len(_lines(archived / ".memctl" / "learned_sessions.jsonl")) < 10
    finished = _learn(run, archived)
    assert finished.returncode == 0, finished.stderr
    assert _state(archived) == expected


def test_learn_limit_and_dry_run(archived, run):
    plan = run("learn", "--dry-run", root=archived)
    assert plan.returncode == 0 and len(plan.stdout.splitlines()) == 10 and not (archived / "long_term.jsonl").stat().st_size
    assert json.loads(_learn(run, archived, "--limit", "4").stdout)["learned"] == 4
    assert len(run("learn", "--dry-run", root=archived).stdout.splitlines()) == 6


def test_learn_reads_genericagents_adopted_archive(tmp_path, run):
    checkout = make_checkout(tmp_path)
    example = Path(REAL_WRITER).parent / "L4_raw_sessions_example"
    checkout.l4.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(example / "all_histories.txt", checkout.l4 / "all_histories.txt")
    assert run("init", cwd=checkout.base).returncode == 0  # adopts the history-only sessions
    report = json.loads(_learn(run, checkout.memory).stdout)
    assert report["learned"] == report["sessions"] >= 2 and report["messages"] > 0
    sessions = {s["session"] for e in _lines(checkout.memory / "long_term.jsonl") for s in e.get("sources", [])}
    assert {"0403_2013-0403_2028", "0405_0902-0405_0908"} & sessions


def test_a_damaged_session_is_reported_and_the_others_are_learned(archived, run):
    import zipfile

    manifest = _lines(archived / "L4_raw_sessions" / "manifest.jsonl")
    victim = manifest[0]
    zip_path = archived / "L4_raw_sessions" / victim["zip"]
    with zipfile.ZipFile(zip_path) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    members[victim["member"]] = members[victim["member"]][:200]  # cut: it no longer decodes to its sha256
    with zipfile.ZipFile(zip_path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    result = run("learn", "--json", root=archived, env=ENV)
    assert result.returncode == 3, result.stderr
    report = json.loads(result.stdout)
    assert report["learned"] == 9 and len(report["errors"]) == 1 and report["errors"][0].startswith(victim["name"])
    assert b"Traceback" not in result.stderr
    assert json.loads(_learn(run, archived).stdout)["learned"] == 0  # only the damaged one is left, and fails again


def test_a_progress_line_on_a_terminal_and_none_when_piped(archived, memctl_bin):
    import os
    import pty
    import subprocess

    from conftest import clean_env

    leader, follower = pty.openpty()
    try:
        done = subprocess.run([memctl_bin, "--root", str(archived), "learn"], stdout=subprocess.PIPE,
                              stderr=follower, env=clean_env(**ENV), timeout=120)
        os.close(follower)
        follower = -1
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal's other end is closed: all read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert done.returncode == 0
    assert b"\rlearn: 1/10 sessions" in shown and b"\rlearn: 10/10 sessions" in shown
    assert done.stdout.startswith(b"learned 10 sessions") and b"learn:" not in done.stdout
    again = subprocess.run([memctl_bin, "--root", str(archived), "learn"], capture_output=True, env=clean_env(**ENV),
                           timeout=120)
    assert b"\r" not in again.stderr
