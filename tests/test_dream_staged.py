"""A dream step's new L5 is written beside L5 before the lock (issue #13: short lock holds).

What another writer does between the staging and the lock must survive: an append is carried
into the staged L5, a rewrite makes the step plan again; a killed dream's staged file is
removed by the next dream, and no other writer's sweep removes a live one.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from memctl.core.config import init_root, load_settings
from memctl.longterm import dream, dream_rows
from memctl.longterm.entries import Entry, iter_entries, write_entries
from memctl.longterm.recovery import writing
from memctl.longterm.store import open_store

NOW = datetime(2026, 6, 1, 4, 0, 0)
RECENT = "2026-05-30T10:00:00"


@pytest.fixture
def settings(root):
    init_root(root)
    entries = [Entry(id=f"n{i}", text=f"note number {i} about topic {i * 7919 % 1000}", type="lesson",
                     created=RECENT, updated=RECENT) for i in range(40)]
    entries += [Entry(id=k, text=t, type="case", created=RECENT, updated=RECENT, source=k) for k, t in (
        ("a", "Always run the migrations before deploying the api"),
        ("b", "always run migrations before deploying the API!"),
        ("c", "Always run the migration before deploying the api"))]
    write_entries(root / "long_term.jsonl", entries)
    return load_settings(root)


def _interfere_once(monkeypatch, action):
    """Run `action(store)` right after the dream staged its first rewrite (outside the lock)."""
    original = dream_rows.StagedLean.__init__
    calls = []

    def staged_then_interfere(self, path, rewrite, suffix):
        original(self, path, rewrite, suffix)
        calls.append(path)
        if len(calls) == 1:
            action(open_store_of(path))

    monkeypatch.setattr(dream_rows.StagedLean, "__init__", staged_then_interfere)
    return calls


def open_store_of(path):
    return open_store(load_settings(path.parent).layout)


def _remember_raw(store, entry_id, text):
    with writing(store_layout(store)):
        store.active.append([Entry(id=entry_id, text=text, type="lesson", created=RECENT, updated=RECENT)])


def store_layout(store):
    return load_settings(store.active._path.parent).layout


def test_an_append_between_staging_and_the_lock_is_kept(settings, monkeypatch):
    calls = _interfere_once(monkeypatch, lambda s: _remember_raw(s, "late", "written while the dream staged"))
    report = dream.run(settings, NOW, dream.DreamOptions(force=True))
    assert len(calls) == 1, "the append was not carried into the staged L5"
    ids = [e.id for e in iter_entries(settings.layout.long_term)]
    assert "late" in ids and ids.count("late") == 1
    assert report.counts == {"consolidate": 3} and report.replans == 0  # a, b, c became one, in one go
    assert not {"a", "b", "c"} & set(ids) and len(ids) == 43 - 3 + 1 + 1
    assert not list(settings.layout.root.glob(".long_term.jsonl.*"))  # nothing staged left over


def test_a_rewrite_between_staging_and_the_lock_makes_the_step_plan_again(settings, monkeypatch):
    def supersede_like(store):
        with writing(store_layout(store)):
            snapshot = store.active.snapshot()
            rows = [r for r in snapshot.rows if r.entry.id != "n3"]
            rows.append(store.row_for(Entry(id="n3b", text="note three, corrected", type="lesson",
                                            created=RECENT, updated=RECENT)))
            store.active.rewrite(rows)

    calls = _interfere_once(monkeypatch, supersede_like)
    dream.run(settings, NOW, dream.DreamOptions(force=True))
    assert len(calls) == 2  # staged, found rewritten under it, planned and staged again
    ids = [e.id for e in iter_entries(settings.layout.long_term)]
    assert "n3b" in ids and "n3" not in ids  # the rewrite was not undone by the staged L5
    assert len(ids) == len(set(ids))
    assert not list(settings.layout.root.glob(".long_term.jsonl.*"))


def test_a_writer_does_not_sweep_a_live_staged_file_and_the_next_dream_removes_a_dead_one(settings):
    active = open_store(settings.layout).active
    staged = active.stage_rewrite(active.snapshot().rows)
    with writing(settings.layout):  # every writer sweeps stale temp files at its start
        pass
    assert staged.present()
    dream.run(settings, NOW, dream.DreamOptions(force=True))  # the left one is a killed dream's
    assert not staged.present()
    assert not list(settings.layout.root.glob(".long_term.jsonl.*"))
