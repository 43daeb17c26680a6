"""A dream keeps the write lookups in step with its rewrite of L5 (issue #31): the first write
after it neither rebuilds them nor reads L5 or L6 whole for its bad-line check — and what the
lookups hold is what a rebuild from the files would hold, row for row, in file order."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3

import pytest

from memctl.cli import writes
from memctl.core.config import init_root, load_settings
from memctl.longterm import dream, dream_apply, dream_rows, entries, lookups
from memctl.longterm.recovery import writing
from memctl.longterm.remember import RememberRequest, remember
from memctl.longterm.store import open_store
from test_dream_streamed import NOW, _lines


def _memory(root, monkeypatch, bad_line: bool = False):
    init_root(root)
    lines = [line for line in _lines(random.Random(13), 600) if _is_entry(line)]
    if bad_line:
        lines.insert(100, "{not an entry, kept where it is")
    (root / "long_term.jsonl").write_text("".join(line + "\n" for line in lines))
    (root / "L4_raw_sessions").mkdir(exist_ok=True)
    monkeypatch.setenv("MEMCTL_NOW", NOW.isoformat())
    settings = load_settings(root)
    remember(settings, RememberRequest("a fact written before the dream", "lesson", "", 5.0, "", False, []),
             NOW.isoformat(timespec="seconds"), 5.0)  # the lookups built, current with both files
    return settings


def _is_entry(line: str) -> bool:
    return lookups.entry_of(line.encode()) is not None


def _dump(state_dir) -> dict:
    """The lookups' rows in file order (seqs themselves are not compared, their order is)."""
    db = sqlite3.connect(state_dir / lookups.FILE_NAME)
    try:
        l5 = db.execute("SELECT l5.*, off, len FROM l5 JOIN l5_at USING (seq) ORDER BY seq").fetchall()
        return {"l5": [row[1:] for row in l5],
                "l5_seqs_ascending": [row[0] for row in l5] == sorted(row[0] for row in l5),
                "l6": db.execute("SELECT * FROM l6 ORDER BY id").fetchall(),
                "state": db.execute("SELECT file, lines, bad FROM state ORDER BY file").fetchall(),
                "at": db.execute("SELECT count(*) FROM l5_at").fetchone()}
    finally:
        db.close()


def _rebuilt(settings, tmp_path) -> dict:
    """What a rebuild from the files makes: the same memory copied, its lookups deleted."""
    copy = tmp_path / "rebuilt"
    shutil.copytree(settings.layout.root, copy)
    (copy / ".memctl" / lookups.FILE_NAME).unlink()
    layout = load_settings(copy).layout
    with writing(layout):
        store = open_store(layout)
        assert store.active.lookups_follow() is False  # never rebuilt by `follows`
        assert store.active._view() is not None and store.archive._view() is not None
    return _dump(copy / ".memctl")


def _spy(monkeypatch):
    """Calls of the two whole-file reads the issue is about."""
    calls = []
    rebuild, bad_lines = lookups.Lookups._rebuild, entries.bad_lines
    monkeypatch.setattr(lookups.Lookups, "_rebuild", lambda self, which, path: (calls.append(("rebuild", which)),
                                                                                 rebuild(self, which, path))[1])
    monkeypatch.setattr("memctl.longterm.store.bad_lines", lambda path: (calls.append(("bad_lines", path.name)),
                                                                          bad_lines(path))[1])
    return calls


@pytest.mark.parametrize("step_changes", [1000, 40])
def test_after_a_dream_the_lookups_are_what_a_rebuild_makes_and_nothing_is_read_whole(
        root, tmp_path, monkeypatch, step_changes, capsys):
    settings = _memory(root, monkeypatch)
    monkeypatch.setattr(dream_apply, "STEP_CHANGES", step_changes)
    # a remember between a step's staging and its lock: the step's tail, moved past its added rows
    original, staged = dream_rows.StagedLean.__init__, []

    def staged_then_remember(self, path, rewrite, suffix):
        original(self, path, rewrite, suffix)
        staged.append(path)
        if len(staged) in (1, 3):
            remember(settings, RememberRequest(f"written while step {len(staged)} was staged", "lesson", "",
                                               5.0, "", False, []), NOW.isoformat(timespec="seconds"), 5.0)

    monkeypatch.setattr(dream_rows.StagedLean, "__init__", staged_then_remember)
    calls = _spy(monkeypatch)
    report = dream.run(settings, NOW, dream.DreamOptions(force=True))
    assert report.steps >= (1 if step_changes == 1000 else 4) and sum(report.counts.values()) > 150
    assert calls == []  # the dream rebuilt nothing
    after = _dump(settings.layout.state_dir)
    assert after == _rebuilt(settings, tmp_path)
    calls.clear()  # the copy's rebuild
    assert after["l5_seqs_ascending"] and after["state"][0][1] == report.l5_after + 0  # every line an entry

    writes.warn_bad_lines(settings.layout)  # the first write's check: nothing read whole
    result = remember(settings, RememberRequest("the first fact after the dream", "lesson", "", 5.0, "", False, []),
                      NOW.isoformat(timespec="seconds"), 5.0)
    assert result.action == "added" and calls == []
    assert capsys.readouterr().err == ""


def test_a_bad_line_is_still_reported_after_a_dream(root, tmp_path, monkeypatch, capsys):
    settings = _memory(root, monkeypatch, bad_line=True)
    dream.run(settings, NOW, dream.DreamOptions(force=True))
    assert _dump(settings.layout.state_dir) == _rebuilt(settings, tmp_path)  # followed around it
    writes.warn_bad_lines(settings.layout)  # kept by the dream where it was: still reported
    assert "long_term.jsonl:" in capsys.readouterr().err

    clean = _memory(root.parent / "clean", monkeypatch)
    dream.run(clean, NOW, dream.DreamOptions(force=True))
    calls = _spy(monkeypatch)
    writes.warn_bad_lines(clean.layout)
    assert calls == [] and capsys.readouterr().err == ""
    with open(clean.layout.long_term, "a") as handle:  # a hand edit after the dream
        handle.write('{"id": "x", "text": 7}\n')
    writes.warn_bad_lines(clean.layout)
    err = capsys.readouterr().err
    assert ("bad_lines", "long_term.jsonl") in calls and f"long_term.jsonl:{report_lines(clean)}:" in err


def report_lines(settings) -> int:
    return sum(1 for line in settings.layout.long_term.read_bytes().splitlines() if line.strip())


def test_lookups_that_were_not_current_before_the_dream_are_left_to_the_next_writer(root, monkeypatch):
    settings = _memory(root, monkeypatch)
    stat = os.stat(settings.layout.long_term)  # touched by another program: the lookups no longer vouch
    os.utime(settings.layout.long_term, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    calls = _spy(monkeypatch)
    dream.run(settings, NOW, dream.DreamOptions(force=True))
    assert calls == []  # no rebuild under the dream's lock
    with writing(settings.layout):
        store = open_store(settings.layout)
        assert not store.active.lookups_follow()
        assert store.active._view() is not None  # the next writer rebuilds
    assert ("rebuild", "l5") in calls


def test_a_failed_follow_leaves_the_lookups_to_the_next_writers_rebuild(root, tmp_path, monkeypatch):
    from memctl.longterm import lookups_rewrite

    settings = _memory(root, monkeypatch)

    def failing(db, prepared, written):
        db.execute("DELETE FROM l5")  # half done, then the disk fails: rolled back, state dropped
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(lookups_rewrite, "_apply", failing)
    dream.run(settings, NOW, dream.DreamOptions(force=True))
    calls = _spy(monkeypatch)
    result = remember(settings, RememberRequest("the first fact after the dream", "lesson", "", 5.0, "", False, []),
                      NOW.isoformat(timespec="seconds"), 5.0)
    assert result.action == "added" and ("rebuild", "l5") in calls
    assert _dump(settings.layout.state_dir) == _rebuilt(settings, tmp_path)
