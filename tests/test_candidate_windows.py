"""The candidates' windows (`policies.candidate_windows`) are implied by the class bound.

The lookups' near-duplicate query seeks, within each key length, a range of digit counts and
tests a signature of every class's count before the class bound itself. Those conditions
must follow from the bound: the query then returns exactly the rows the bound alone keeps (in
file order), which hold every row that can reach the cutoff. Checked here on class count
vectors at and around the bound (pure arithmetic, ~60,000 pairs that pass it) and on the
query plan (SQLite seeks); tests/test_write_lookups.py compares the lookups' candidates with
the bound and with rapidfuzz over random and adversarial texts.
"""

from __future__ import annotations

import random
import sqlite3

import pytest

from memctl.core.config import init_root, load_settings
from memctl.longterm.entries import Entry, entry_line
from memctl.longterm.policies import (CLASSES, candidate_windows, class_signature, key_classes, match_key,
                                      reachable_lengths)

CUTOFFS = [1, 10, 40, 60, 75, 88, 95, 100]


def _passes_bound(query: tuple[int, ...], row: tuple[int, ...], cutoff: float) -> bool:
    """The class bound as SQL evaluates it (lookups._CLASS_BOUND, floats, the 1e-6 slack)."""
    a, b = sum(query), sum(row)
    return 200.0 * sum(min(c, q) for c, q in zip(row, query)) >= (cutoff - 1e-6) * (a + b)


def _inside(window: tuple[int, int, int, int, int], row: tuple[int, ...]) -> bool:
    shortest, longest, fewest, most, ruled_out = window
    return shortest <= sum(row) <= longest and fewest <= row[1] <= most and class_signature(row) & ruled_out == 0


def _window_for(windows, length: int):
    found = [w for w in windows if w[0] <= length <= w[1]]
    assert len(found) <= 1  # the windows' length ranges never overlap
    return found[0] if found else None


def _near(rng: random.Random, query: list[int], spread: int) -> tuple[int, ...]:
    """A count vector a few characters away from `query`: most pairs end near the bound."""
    row = list(query)
    for _ in range(rng.randint(0, spread)):
        index = rng.randrange(CLASSES)
        row[index] = max(0, row[index] + rng.choice((-1, 1, 1, -2, 2)))
    return tuple(row)


def test_every_count_vector_that_passes_the_bound_is_inside_its_window():
    rng = random.Random(5)
    passed = at_edge = 0
    for _ in range(4_000):
        query = [rng.choice((0, 0, 1, 2, 5, 9, 14, 15, 30)) if rng.random() < 0.5 else rng.randint(0, 40)
                 for _ in range(CLASSES)]
        if not any(query):
            continue
        cutoff = rng.choice(CUTOFFS)
        a = sum(query)
        windows = candidate_windows(tuple(query), a, cutoff - 1e-6, *reachable_lengths("x" * a, cutoff))
        for _ in range(40):
            row = _near(rng, query, rng.choice((2, 6, 12, 30)))
            if not _passes_bound(tuple(query), row, cutoff):
                continue
            passed += 1
            b = sum(row)
            window = _window_for(windows, b)
            assert window is not None and _inside(window, row), (query, row, cutoff, window)
            t = (cutoff - 1e-6) * (a + b) / 200
            at_edge += any(c - q > b - t - 1 or q - c > a - t - 1 for c, q in zip(row, query))
    assert passed > 30_000 and at_edge > 1_000  # many pairs within a character of the windows' edges


def test_the_windows_leave_out_most_of_what_the_length_bound_keeps():
    """Not a correctness condition: that the windows do their job (the bench's fact shape)."""
    query = key_classes(match_key("bench note t 50001: rotated the cache on host w50001"))
    rng = random.Random(9)
    a = sum(query)
    low, high = reachable_lengths("x" * a, 88)
    windows = candidate_windows(query, a, 88 - 1e-6, low, high)
    rows = [tuple(rng.randint(0, 12) for _ in range(CLASSES)) for _ in range(20_000)]
    in_lengths = [row for row in rows if low <= sum(row) <= high]
    kept = [row for row in in_lengths if _inside(_window_for(windows, sum(row)), row)]
    assert len(in_lengths) > 5_000 and len(kept) < len(in_lengths) / 4


def _memory(tmp_path, texts: list[str], kinds: list[str]):
    root = tmp_path / "memory"
    init_root(root)
    entries = [Entry(id=f"c{i:04d}", text=text, type=kind, created="2026-04-01T00:00:00",
                     updated="2026-04-01T00:00:00") for i, (text, kind) in enumerate(zip(texts, kinds))]
    (root / "long_term.jsonl").write_bytes(b"".join(entry_line(e) for e in entries))
    return root, entries


def test_sqlite_seeks_the_digit_range_of_each_length(tmp_path, monkeypatch):
    from memctl.longterm.lookups import _candidate_query
    from memctl.longterm.remember import RememberRequest, remember

    monkeypatch.setenv("MEMCTL_LOOKUPS", "1")
    root, _ = _memory(tmp_path, [f"deploy cache on host n{i}" for i in range(50)], ["event"] * 50)
    remember(load_settings(root), RememberRequest("rotated the cache on w3", "event"), "2026-05-01T09:00:00", 0)
    text = "bench note t 50001: rotated the cache on host w50001"
    key = match_key(text)
    sql, params = _candidate_query("key", "event", *reachable_lengths(text, 88), (key_classes(key), 88, len(key)))
    db = sqlite3.connect(root / ".memctl" / "lookups.sqlite")
    plan = " | ".join(row[-1] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    db.close()
    assert "USING COVERING INDEX l5_cand (type=? AND klen=? AND c1>? AND c1<?)" in plan, plan


@pytest.mark.parametrize("cutoff", [0, 88])
def test_a_query_longer_than_any_key_finds_nothing_and_fails_nothing(tmp_path, monkeypatch, cutoff):
    from memctl.longterm.recovery import writing
    from memctl.longterm.store import open_store

    monkeypatch.setenv("MEMCTL_LOOKUPS", "1")
    root, _ = _memory(tmp_path, ["deploy cache", "部署 缓存"], ["event", "event"])
    layout = load_settings(root).layout
    store = open_store(layout)
    with writing(layout, 5):
        found = store.active.candidates("event", "deploy " * 3000, cutoff)
        assert store.active._view() is not None
    assert list(found.keys) == ([] if cutoff else [match_key("deploy cache"), match_key("部署 缓存")])
