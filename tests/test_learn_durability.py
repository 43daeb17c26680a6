"""A SIGKILL at any point of `turn`, `compact` or `dispose` loses no acknowledged message, and
running the command again completes the work without a duplicate (memctl.core.faults)."""

from __future__ import annotations

import json

import pytest

from durability_helpers import every_line_parses, l5, l6
from test_learn_session import SESSION, jsonl

NOW = {"MEMCTL_NOW": "2026-12-01T12:00:00"}
LABELS = ("learn: buffered", "learn: extracted", "learn: candidate routed", "learn: routed",
          "learn: short-term kept", "unlocked, last append not yet synced")
KILLED = -9


def _steps(run, root, env: dict) -> list:
    """The session's commands in order: the first turn stays under the threshold, the second
    reaches it (extracts), then compact and dispose."""
    return [
        lambda extra: run("turn", "--session", "s", root=root, input=jsonl(SESSION[:2]), env={**env, **extra}),
        lambda extra: run("turn", "--session", "s", root=root, input=jsonl(SESSION[:4]), env={**env, **extra}),
        lambda extra: run("turn", "--session", "s", root=root, input=jsonl(SESSION[4:]), env={**env, **extra}),
        lambda extra: run("compact", "--session", "s", root=root, env={**env, **extra}),
        lambda extra: run("dispose", "--session", "s", root=root, env={**env, **extra}),
    ]


def _memory(run, root):
    assert run("init", root=root).returncode == 0
    with open(root / "memctl.toml", "a", encoding="utf-8") as handle:
        handle.write("\n[learn]\nturns = 3\n")
    return root


def _outcome(root) -> dict:
    every_line_parses(root)
    active = l5(root)
    ids = [e["id"] for e in active]
    assert len(ids) == len(set(ids)), "an entry twice in L5"
    buffered = [json.loads(line) for line in (root / "sessions" / "s.jsonl").read_text().splitlines()]
    short = [json.loads(line)["session"] for line in (root / "short_term.jsonl").read_text().splitlines()]
    return {"l5": sorted((e["id"], e["text"], json.dumps(e.get("sources"))) for e in active),
            "l6": sorted(e["id"] for e in l6(root)), "buffered": [m["id"] for m in buffered], "short": short}


@pytest.fixture
def reference(run, tmp_path) -> dict:
    root = _memory(run, tmp_path / "reference")
    for step in _steps(run, root, NOW):
        done = step({})
        assert done.returncode == 0, done.stderr
    outcome = _outcome(root)
    assert outcome["buffered"] == ["u1", "a1", "u2", "u3", "u4"] and len(outcome["l5"]) >= 3 and outcome["l6"]
    return outcome


def _through_kills(run, root, fault: dict) -> int:
    """Every step with the fault; a killed step is run again without it. How many were killed."""
    killed = 0
    for step in _steps(run, root, NOW):
        done = step(fault)
        if done.returncode == KILLED:
            killed += 1
            done = step({})
        assert done.returncode == 0, done.stderr
    return killed


@pytest.mark.parametrize("label", LABELS)
def test_a_kill_at_each_step_loses_nothing_and_the_rerun_writes_nothing_twice(run, tmp_path, reference, label):
    root = _memory(run, tmp_path / "memory")
    killed = _through_kills(run, root, {"MEMCTL_FAULT_AT": label})
    assert killed >= 1, f"no step reached {label!r}"
    assert _outcome(root) == reference


@pytest.mark.parametrize("after", [1, 2, 3, 5, 8, 13])
def test_a_kill_after_any_count_of_checkpoints_loses_nothing(run, tmp_path, reference, after):
    root = _memory(run, tmp_path / "memory")
    _through_kills(run, root, {"MEMCTL_FAULT_AFTER": str(after)})
    assert _outcome(root) == reference


@pytest.mark.parametrize("write", [1, 2, 3, 4])
def test_a_torn_write_is_cut_aside_and_the_retry_completes(run, tmp_path, reference, write):
    root = _memory(run, tmp_path / "memory")
    killed = _through_kills(run, root, {"MEMCTL_FAULT_WRITE": f"{write}:torn"})
    assert killed >= 1
    assert _outcome(root) == reference


def test_an_acknowledged_turn_survives_a_torn_write_of_the_next_one(run, tmp_path):
    root = _memory(run, tmp_path / "memory")
    assert run("turn", "--session", "s", root=root, input=jsonl(SESSION[:2]), env=NOW).returncode == 0
    torn = run("turn", "--session", "s", root=root, input=jsonl(SESSION[2:]),
               env={**NOW, "MEMCTL_FAULT_WRITE": "1:torn"})
    assert torn.returncode == KILLED
    data = (root / "sessions" / "s.jsonl").read_bytes()
    assert not data.endswith(b"\n")  # half a batch: whole lines of it, then a torn one
    ids = [json.loads(line)["id"] for line in data.split(b"\n")[:-1]]
    assert ids[:2] == ["u1", "a1"]  # the acknowledged batch is whole
    retried = run("turn", "--session", "s", root=root, input=jsonl(SESSION[2:]), env=NOW)
    assert retried.returncode == 0, retried.stderr
    ids = [json.loads(line)["id"] for line in (root / "sessions" / "s.jsonl").read_text().splitlines()]
    assert ids == ["u1", "a1", "u2", "u3", "u4"]
    assert list((root / ".memctl" / "torn").iterdir())  # the torn line was kept aside, not glued on
