"""The working layer: `task save|list|show|done` across separate processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from memctl.agent import tasks
from memctl.core.config import Layout
from memctl.core.fsutil import WriterLock


def _l5(root) -> list[dict]:
    path = root / "long_term.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _save(run, root, task_id, state, when):
    return run("task", "save", task_id, root=root, input=json.dumps(state).encode(), env={"MEMCTL_NOW": when})


def test_save_resume_and_finish_across_processes(run, root):
    assert run("init", root=root).returncode == 0
    first = {"goal": "restore nightly backup on bk-02", "step": 1, "notes": ["403 since Apr 5"]}
    saved = _save(run, root, "bk-02-backup", first, "2026-04-05T09:00:00")
    assert saved.returncode == 0, saved.stderr
    path = root / "working" / "bk-02-backup.json"
    assert saved.stdout.decode().strip() == str(path)
    assert oct(path.stat().st_mode & 0o777) == "0o600"

    # an interrupted second task: saved, never finished
    assert _save(run, root, "invoice-ocr", {"goal": "ocr invoices", "step": 3}, "2026-04-05T09:30:00").returncode == 0

    # a fresh process resumes the first task
    shown = run("task", "show", "bk-02-backup", root=root)
    assert shown.returncode == 0
    resumed = json.loads(shown.stdout)
    assert resumed == first
    resumed.update(step=4, summary="stale key after rotation; restarted backup-agent")
    assert _save(run, root, "bk-02-backup", resumed, "2026-04-05T10:00:00").returncode == 0

    listed = run("task", "list", "--json", root=root)
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [r["id"] for r in rows] == ["bk-02-backup", "invoice-ocr"]  # most recently saved first
    assert rows[0]["saves"] == 2 and rows[0]["created"] == "2026-04-05T09:00:00"

    finished = run("task", "done", "bk-02-backup", "--json", root=root, env={"MEMCTL_NOW": "2026-04-05T10:05:00"})
    assert finished.returncode == 0, finished.stderr
    entry = json.loads(finished.stdout)
    assert not path.exists()
    (case,) = _l5(root)
    assert case == entry
    assert case["type"] == "case" and case["topic"] == "bk-02-backup"
    assert case["state"] == resumed
    assert "stale key after rotation" in case["text"]
    assert case["created"] == "2026-04-05T10:05:00"

    # the interrupted task is still there, untouched
    after = run("task", "list", root=root).stdout.decode().splitlines()
    assert len(after) == 1 and after[0].startswith("invoice-ocr\t")
    assert json.loads(run("task", "show", "invoice-ocr", root=root).stdout) == {"goal": "ocr invoices", "step": 3}
    assert run("task", "done", "bk-02-backup", root=root).returncode == 2  # already done


def test_a_killed_agent_leaves_its_task_resumable(run, root, memctl_bin):
    run("init", root=root)
    assert _save(run, root, "long-job", {"step": 7}, "2026-04-05T09:00:00").returncode == 0
    # the agent process dies mid-turn while waiting on stdin for its next save
    agent = subprocess.Popen([memctl_bin, "--root", str(root), "task", "save", "long-job"], stdin=subprocess.PIPE)
    agent.stdin.write(b'{"step": ')
    agent.stdin.flush()
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait()
    assert json.loads(run("task", "show", "long-job", root=root).stdout) == {"step": 7}
    assert not list((root / "working").glob(".*.tmp"))


def test_state_over_10_kb_is_refused(run, root):
    run("init", root=root)
    big = {"blob": "x" * (10 * 1024)}
    refused = _save(run, root, "big", big, "2026-04-05T09:00:00")
    assert refused.returncode == 2
    assert b"10240" in refused.stderr
    assert not (root / "working" / "big.json").exists()
    fits = {"blob": "x" * (10 * 1024 - 20)}
    assert _save(run, root, "fits", fits, "2026-04-05T09:00:00").returncode == 0


def test_secrets_in_state_are_redacted(run, root):
    run("init", root=root)
    token = "gh" + "p_" + "Qw3" * 12
    password = "Pa55" + "word-xyz"
    state = {"cmd": f"git push https://{token}@github.com/o/r", "db": {"password": password}, "step": 2}
    assert _save(run, root, "push", state, "2026-04-05T09:00:00").returncode == 0
    stored = (root / "working" / "push.json").read_text()
    assert token not in stored and password not in stored
    shown = json.loads(run("task", "show", "push", root=root).stdout)
    assert shown["step"] == 2 and "[REDACTED:" in shown["db"]["password"]


def test_bad_input_and_ids(run, root):
    run("init", root=root)
    assert run("task", "save", "t1", root=root, input=b"{not json").returncode == 2
    assert run("task", "save", "t1", root=root, input=b"").returncode == 2
    for bad in ("../escape", ".hidden", "a/b", ""):
        result = run("task", "save", bad, root=root, input=b"{}")
        assert result.returncode == 2, bad
    assert not any((root / "working").iterdir())
    assert run("task", "show", "missing", root=root).returncode == 2


def test_save_waits_for_the_lock_or_exits_75(run, root):
    run("init", root=root)
    with WriterLock(Layout(root).lock):
        busy = run("task", "save", "t1", "--wait", "0", root=root, input=b'{"a": 1}')
    assert busy.returncode == 75
    assert not (root / "working" / "t1.json").exists()


def test_done_after_a_crash_between_append_and_unlink_does_not_duplicate(run, root, monkeypatch):
    run("init", root=root)
    assert _save(run, root, "t1", {"summary": "done it"}, "2026-04-05T09:00:00").returncode == 0
    layout = Layout(root)

    def crash(path):
        raise OSError("killed before unlink")

    monkeypatch.setattr(tasks.os, "unlink", crash)
    with pytest.raises(OSError):
        tasks.done(layout, "t1", "2026-04-05T09:10:00")
    monkeypatch.undo()
    assert len(_l5(root)) == 1 and (root / "working" / "t1.json").exists()
    assert run("task", "done", "t1", root=root).returncode == 0
    assert len(_l5(root)) == 1 and not (root / "working" / "t1.json").exists()


def test_active_task_is_the_most_recent(run, root):
    run("init", root=root)
    _save(run, root, "older", {"a": 1}, "2026-04-05T09:00:00")
    _save(run, root, "newer", {"b": 2}, "2026-04-05T10:00:00")
    assert tasks.active(Layout(root)).id == "newer"


def test_save_from_a_terminal_explains_instead_of_waiting(root, memctl_bin, run):
    import pty

    run("init", root=root)
    primary, secondary = pty.openpty()
    try:
        result = subprocess.run([memctl_bin, "--root", str(root), "task", "save", "t1"], stdin=secondary,
                                capture_output=True, timeout=60)
    finally:
        os.close(primary)
        os.close(secondary)
    assert result.returncode == 2
    assert b"on stdin" in result.stderr
