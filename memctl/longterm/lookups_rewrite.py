"""The write lookups kept in step with a dream's rewrite of L5, so that the first write after a
dream finds them current instead of rebuilding them (issue #31: ~6 s of CPU at 100k entries,
most of it every line's match key, and the write check reading every line of L5 again).

A dream step knows what it writes: L5's lines but those it removes, some replaced in place,
then its added lines, then what was appended meanwhile (the tail). The lookups' L5 rows are
the entry lines of the file in `seq` order, so the rows of the lines a step leaves alone keep
their seq and their fields, and only their offsets move — by the same amount over every run of
lines between two changes. `Prepared` computes, outside the lock, the fields of the lines the
step writes (their match keys are what a rebuild spends its time on) and the changes in file
order; `follow` (under the writer lock, right after the new L5 is in place) deletes the removed
rows, updates the replaced ones, shifts each run's offsets with one statement, appends the
added rows after the old ones and the tail's after those, and records the new file's state —
one transaction, its cost the number of changes (plus one read of the rows' seqs), not L5's
size. Anything it cannot vouch for (the lookups not current before the step, a count that does
not match, a line L5's reader took apart differently) leaves the state as it was, which no
longer matches the file: the next writer rebuilds, as before.
"""

from __future__ import annotations

from array import array

import os

from memctl.core import sqlite
from memctl.longterm.lookups import _L5_INSERT, _L5_UPDATE, GONE, Lookups, _add_l6, _l5_fields, entry_of


class Prepared:
    """A step's changes to L5's lines, with the lookup fields of every line it writes."""

    def __init__(self, rows, removed: set[int], replaced: dict[int, bytes], added: list[tuple[str, bytes]]) -> None:
        self.rows = rows  # the old view (dream_rows.LeanRows) the rewrite is made from
        self.usable = getattr(rows, "lean", False) and not rows.has_odd_lines()
        self.mask = rows.entry_mask() if self.usable else b""
        self.changes = sorted(removed | set(replaced)) if self.usable else []
        self.removed = removed
        self.replaced: dict[int, tuple[int, tuple]] = {}  # position -> (new length, fields)
        self.added: list[tuple[str, int, tuple]] = []  # (id, length, fields)
        self.l6: list[tuple[int, _L6Line]] | None = []  # the step's L6 lines: (length, what the lookups keep)
        if not self.usable:
            return
        for position, raw in replaced.items():
            entry = entry_of(raw)
            if entry is None:
                self.usable = False
                return
            self.replaced[position] = (len(raw), _l5_fields(entry))
        for entry_id, raw in added:
            entry = entry_of(raw)
            if entry is None:
                self.usable = False
                return
            self.added.append((entry.id, len(raw), _l5_fields(entry)))


    def add_l6(self, data: bytes) -> None:
        """The step's L6 lines (`data`, whole lines, in the order they are appended), read
        before the lock for what the lookups keep of each: none held but a forgotten line's text."""
        if self.l6 is None:
            return
        for raw in data.splitlines(keepends=True):
            entry = entry_of(raw)
            if entry is None:
                self.l6 = None
                return
            gone = entry.reason in GONE
            self.l6.append((len(raw), _L6Line(entry.id, entry.reason, {"sha256": entry.extra.get("sha256")} if gone
                                              else {}, entry.text if gone else "")))


class _L6Line:
    """What `lookups._add_l6` reads of an L6 entry."""

    __slots__ = ("id", "reason", "extra", "text")

    def __init__(self, entry_id: str, reason: str, extra: dict, text: str) -> None:
        self.id, self.reason, self.extra, self.text = entry_id, reason, extra, text


def follow_appends(lookups: Lookups, path, base: int, prepared: Prepared) -> bool:
    """After the step's L6 lines were appended at `base` (the lookups current with L6 of that
    size, checked by the caller): their rows and the state follow, without reading them again."""
    lines = prepared.l6

    def add(db: sqlite.Connection) -> bool:
        if lines is None or os.stat(path).st_size != base + sum(length for length, _ in lines):
            return False
        spans, at = [], base
        for length, _ in lines:
            spans.append((at, length))
            at += length
        _add_l6(db, spans, [line for _, line in lines])
        db.execute("UPDATE state SET lines = lines + ? WHERE file='l6'", (len(lines),))
        return True

    return _in_transaction(lookups, "l6", path, add)


def follow(lookups: Lookups, path, prepared: Prepared, written_rows) -> bool:
    """After the step's new L5 is in place (lookups current with the file before it, checked by
    the caller with `Lookups.follows`): the rows and the state follow it. False when they could
    not (the state is then dropped: the next writer rebuilds)."""
    return _in_transaction(lookups, "l5", path, lambda db: prepared.usable and _apply(db, prepared, written_rows))


def _in_transaction(lookups: Lookups, which: str, path, change) -> bool:
    """`change(db)` and the file's new state in one transaction; when it returns False or
    fails, nothing of it, and the file's state dropped (rebuilt by the next writer)."""
    done = False
    try:
        db = lookups._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            done = bool(change(db))
            if done:
                lookups._record(db, which, path)
                db.execute("COMMIT")
            else:
                db.execute("ROLLBACK")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
    except (sqlite.Error, OSError):
        done = False
    if not done:
        lookups.drop(which)
    return done


def _apply(db: sqlite.Connection, prepared: Prepared, written) -> bool:
    old = prepared.rows
    seqs = _seqs(db)
    mask = prepared.mask
    old_entries = mask.count(1)
    kept_lines = len(old) - len(prepared.removed)
    tail_start = kept_lines + len(prepared.added)  # the tail's first row in the written file
    tail_entries = written.entry_mask(tail_start).count(1)
    if len(seqs) != old_entries + tail_entries or len(written) < tail_start:
        return False
    if old_entries and not _offsets_agree(db, old, mask, seqs):
        return False
    shift = 0  # how far the lines after the last change moved
    position, ordinal, gone = 0, 0, 0  # the next old line, its entry ordinal, lines removed before it
    runs, deleted, moved, fields = [], [], [], []  # one executemany each: a statement a change
    for change in [*prepared.changes, len(old)]:
        # the untouched lines [position, change): one run, one shift (checked on its first line)
        if position < change and written.offsets[position - gone] != old.offsets[position] + shift:
            return False  # the written file is not laid out as these changes say
        run_entries = mask.count(1, position, change)
        if run_entries and shift:
            runs.append((shift, seqs[ordinal], seqs[ordinal + run_entries - 1]))
        ordinal += run_entries
        if change == len(old):
            break
        if not mask[change]:  # a change is made only to an entry's line
            return False
        seq, old_length = seqs[ordinal], old.lengths[change]
        ordinal += 1
        if change in prepared.removed:
            deleted.append((seq,))
            shift -= old_length
            gone += 1
        else:
            length, new_fields = prepared.replaced[change]
            moved.append((shift, length, seq))
            fields.append((*new_fields, seq))
            shift += length - old_length
        position = change + 1
    db.executemany("DELETE FROM l5 WHERE seq=?", deleted)
    db.executemany("DELETE FROM l5_at WHERE seq=?", deleted)
    db.executemany("UPDATE l5_at SET off = off + ? WHERE seq BETWEEN ? AND ?", runs)
    db.executemany("UPDATE l5_at SET off = off + ?, len = ? WHERE seq=?", moved)
    db.executemany(_L5_UPDATE, fields)
    _place_added_and_tail(db, prepared, written, seqs, old_entries, tail_start)
    db.execute("UPDATE state SET lines = lines + ? WHERE file='l5'", (len(prepared.added) - len(prepared.removed),))
    return True


def _seqs(db: sqlite.Connection) -> array:
    """Every L5 row's seq, ascending: one string from SQLite, not a tuple a row (a third of the time)."""
    (joined,) = db.execute("SELECT group_concat(seq, ' ') FROM (SELECT seq FROM l5_at ORDER BY seq)").fetchone()
    return array("q", map(int, joined.split())) if joined else array("q")


def _offsets_agree(db: sqlite.Connection, old, mask: bytes, seqs: array) -> bool:
    """The first and the last entry line of the old view are where the lookups have them."""
    first = mask.index(1)
    last = mask.rindex(1)
    at = dict(db.execute("SELECT seq, off FROM l5_at WHERE seq IN (?, ?)", (seqs[0], seqs[mask.count(1) - 1])))
    return at.get(seqs[0]) == old.offsets[first] and at.get(seqs[mask.count(1) - 1]) == old.offsets[last]


def _place_added_and_tail(db: sqlite.Connection, prepared: Prepared, written, seqs: array, old_entries: int,
                          tail_start: int) -> None:
    """The added lines after the old ones, the tail (rows made when it was appended) after
    those: seq order stays file order."""
    tail_seqs = seqs[old_entries:]
    next_seq = (seqs[old_entries - 1] if old_entries else 0) + 1
    if tail_seqs and prepared.added:
        # the tail's rows move past the added ones: taken out, put back with new seqs below
        marks = ",".join("?" * len(tail_seqs))
        tail_rows = db.execute(f"SELECT * FROM l5 WHERE seq IN ({marks}) ORDER BY seq", list(tail_seqs)).fetchall()
        db.execute(f"DELETE FROM l5 WHERE seq IN ({marks})", list(tail_seqs))
        db.execute(f"DELETE FROM l5_at WHERE seq IN ({marks})", list(tail_seqs))
        next_seq = max(next_seq, tail_seqs[-1] + 1)
    else:
        tail_rows = None
    at = len(prepared.rows) - len(prepared.removed)
    rows, spans = [], []
    for entry_id, length, fields in prepared.added:
        rows.append((next_seq, entry_id, *fields))
        spans.append((next_seq, written.offsets[at], length))
        next_seq += 1
        at += 1
    db.executemany(_L5_INSERT, rows)
    db.executemany("INSERT INTO l5_at VALUES (?, ?, ?)", spans)
    tail_positions = [p for p in range(tail_start, len(written)) if written.is_entry(p)]
    if tail_rows is not None:
        for row, position in zip(tail_rows, tail_positions):
            db.execute(_L5_INSERT, (next_seq, *row[1:]))
            db.execute("INSERT INTO l5_at VALUES (?, ?, ?)",
                       (next_seq, written.offsets[position], written.lengths[position]))
            next_seq += 1
    else:
        for seq, position in zip(tail_seqs, tail_positions):
            db.execute("UPDATE l5_at SET off = ? WHERE seq=?", (written.offsets[position], seq))

