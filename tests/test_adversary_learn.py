"""Hostile input to the write link's `memctl turn` through the installed command."""

from __future__ import annotations

import json

import pytest

SURROGATE_MESSAGES = [
    '{"role": "user", "content": "\\ud800 x"}\n',
    '{"role": "user", "content": "ok", "speaker": "\\udfff"}\n',
    '{"role": "assistant", "content": "ok", "tool_calls": [{"name": "\\ud83d"}]}\n',
]


@pytest.mark.parametrize("line", SURROGATE_MESSAGES)
def test_a_lone_surrogate_is_refused_and_the_session_stays_readable(run, root, line):
    assert run("init", root=root).returncode == 0
    good = json.dumps({"role": "user", "content": "we deploy with make ship"}) + "\n"
    assert run("turn", "--session", "s1", input=good.encode(), root=root).returncode == 0
    bad = run("turn", "--session", "s1", input=line.encode(), root=root)
    assert bad.returncode == 2
    assert (b"lone surrogate" in bad.stderr or b"not valid UTF-8" in bad.stderr) and bad.stderr.count(b"\n") == 1 and b"Error" not in bad.stderr
    buffered = (root / "sessions" / "s1.jsonl").read_bytes()
    buffered.decode("utf-8")  # every byte on disk is still UTF-8
    assert buffered.count(b"\n") == 1
    for step in ("compact", "dispose"):
        done = run(step, "--session", "s1", root=root)
        assert done.returncode == 0, done.stderr



def test_a_full_disk_under_a_new_sessions_lock_is_not_an_internal_error(run, root, monkeypatch):
    """On a full disk a new lock file gets an inode but not the block of its holder's pid; the
    lock must still be taken, so that the guarded write reports the disk in its own words."""
    import errno

    from memctl.core import fsutil
    from memctl.core.config import load_settings
    from memctl.learn import session

    assert run("init", root=root).returncode == 0

    def full_disk(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fsutil.os, "pwrite", full_disk)
    outcome = session.turn(load_settings(root), "new-session", [{"role": "user", "content": "kept"}], 5)
    assert outcome.buffered == 1
    assert b"kept" in (root / "sessions" / "new-session.jsonl").read_bytes()
