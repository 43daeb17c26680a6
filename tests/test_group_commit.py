"""Group commit: a write's last append is fsynced after the writer lock is released, and the
command acknowledges (returns, exits 0) only once that fsync returned. The next writer does
not wait for this one's disk flush; a journaled multi-file change stays synced step by step."""

from __future__ import annotations

import os
from datetime import datetime

import pytest

from memctl.core import faults
from memctl.core.config import init_root, load_settings
from memctl.core.errors import WriteFailed
from memctl.core.fsutil import holds_writer_lock
from memctl.longterm.forget import forget_ids, restore
from memctl.longterm.remember import RememberRequest, remember

NOW = datetime(2026, 6, 1, 5, 0, 0)


@pytest.fixture
def memory(tmp_path, monkeypatch):
    """A memory, and the deferred fsyncs it sees: (lock held?, bytes of L5 the fd reaches)."""
    root = tmp_path / "memory"
    init_root(root)
    settings = load_settings(root)
    synced = []

    def sync(fd):
        synced.append((holds_writer_lock(settings.layout.lock), os.fstat(fd).st_size))
        os.fsync(fd)

    monkeypatch.setattr(faults, "sync", sync)
    return settings, synced


def _l5_size(settings) -> int:
    return settings.layout.long_term.stat().st_size


def test_an_added_fact_is_synced_after_the_lock_and_before_remember_returns(memory):
    settings, synced = memory
    result = remember(settings, RememberRequest("the proxy listens on 7890", "event"), NOW, 0)
    assert result.action == "added"
    assert synced == [(False, _l5_size(settings))]  # the lock was released, the line was written
    assert result.entry.id.encode() in settings.layout.long_term.read_bytes()


def test_a_restore_is_synced_after_the_lock(memory):
    settings, synced = memory
    entry = remember(settings, RememberRequest("the cache lives on n3", "event"), NOW, 0).entry
    forget_ids(settings, [entry.id], "", NOW, 0)
    synced.clear()
    restore(settings, entry.id, NOW, 0)
    assert synced == [(False, _l5_size(settings))]


def test_journaled_and_rewriting_writes_sync_under_the_lock(memory):
    """A supersede (L6 append, then L5 rewrite), a seen bump (L5 rewrite) and a forget keep
    every fsync inside the lock hold: a later step depends on the earlier being on disk."""
    settings, synced = memory
    remember(settings, RememberRequest("editor is vim", "preference", "editor"), NOW, 0)
    synced.clear()
    assert remember(settings, RememberRequest("editor is helix", "preference", "editor"), NOW, 0).action == "superseded"
    assert remember(settings, RememberRequest("Editor is helix!", "preference", "editor"), NOW, 0).action == "seen"
    first = remember(settings, RememberRequest("the wiki moved to notion", "event"), NOW, 0).entry
    synced.clear()
    assert remember(settings, RememberRequest("The wiki moved to Notion.", "event"), NOW, 0).action == "seen"
    forget_ids(settings, [first.id], "", NOW, 0)
    assert synced == []


def test_a_failed_deferred_fsync_is_an_error_not_an_acknowledgement(run, tmp_path):
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    done = run("remember", "the proxy listens on 7890", "--type", "event", root=root,
               env={"MEMCTL_FAULT_SYNC": "eio"})
    assert done.returncode == 2
    assert done.stdout == b""  # no id printed: nothing acknowledged
    message = done.stderr.decode().strip()
    assert len(message.splitlines()) == 1 and "did not confirm" in message and "Error" not in message
    # the next write (the disk healthy again) works and sees the line
    again = run("remember", "the proxy listens on 7890", "--type", "event", "--json", root=root)
    assert again.returncode == 0 and b'"seen"' in again.stdout


def test_the_in_process_error_is_write_failed_after_the_lock_is_released(memory, monkeypatch):
    settings, _ = memory

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(faults, "sync", full_disk)
    with pytest.raises(WriteFailed, match="did not confirm"):
        remember(settings, RememberRequest("a fact on a full disk", "event"), NOW, 0)
    assert not holds_writer_lock(settings.layout.lock)
