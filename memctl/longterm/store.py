"""The entry store: the one way in to L5 (`long_term.jsonl`), L6 (`archive.jsonl`) and the
dream audit log (`dream_log.jsonl`).

remember, forget/restore/purge, the dream pass, `task done`, `import` and the commands reach
these three through `open_store(layout)`: `store.active` (L5) and `store.archive` (L6), each
an `EntryFile` (read, snapshot, entries, ids, append, rewrite), and the log methods of the
store; none of them names a file. `JsonlEntryStore` is the only backend: JSON Lines files,
built on the format primitives of `memctl.longterm.entries`. A second backend would provide
the same methods and be what `open_store` returns; its callers would not change.

Rows carry each entry's stored form (`Row.raw`), so that a rewrite leaves the entries it
did not change exactly as they were (what `dream --undo` relies on) and a locked step can
see whether an entry is still what was planned.

The write path — remember, forget, restore, `task done`, import — asks only the queries
`count`, `holds`, `row`, `current`, `candidates` and the changes `append`, `replace`, `remove`
of `store.active`, `row` of `store.archive`, and `gone_for_good` and `departed_entry` of the
store, so that a write never reads the whole of L5 or L6 under the lock: the JSON Lines backend
answers them from derived lookups under `.memctl/` (`memctl.longterm.lookups`), validated before
each use and rebuilt from the files when they are stale, and from a scan of the file
(`memctl.longterm.store_scan`, the reference answers) when they cannot answer.
The caller holds the writer lock for every write.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterable, Iterator

from memctl.core.config import Layout
from memctl.core.fsutil import atomic_write_bytes
from memctl.core.jsonl import append_lines, quarantine_torn_tail, split_torn, torn_dir
from memctl.longterm import store_scan
from memctl.longterm.entries import (
    Entry,
    Row,
    Snapshot,
    append_entries,
    bad_lines,
    entry_line,
    iter_entries,
    read_snapshot,
    row_for,
    write_rows,
)


class EntryFile:
    """One store of entries, L5 or L6, as a JSON Lines file."""

    def __init__(self, path: Path, quarantine: Path, unique_ids: bool) -> None:
        self._path = path
        self._quarantine = quarantine
        self._unique = unique_ids  # L5: one line an id; L6: one line each time it left L5

    @property
    def location(self) -> str:
        """Where it is, for the purge report."""
        return str(self._path)

    def snapshot(self, previous: Snapshot | None = None) -> Snapshot:
        """Every row now; when the store only grew since `previous`, only the new ones are parsed."""
        return read_snapshot(self._path, previous)

    def iter(self) -> Iterator[Entry]:
        return iter_entries(self._path)

    def bad_lines(self) -> list[tuple[str, int, str]]:
        """(file name, line number, problem) of each line that is not an entry (skipped, kept)."""
        return [(self._path.name, number, problem) for number, problem in bad_lines(self._path)]

    def entries(self) -> list[Entry]:
        return list(self.iter())

    def ids(self) -> set[str]:
        return {e.id for e in self.iter()}

    def append(self, entries: Iterable[Entry]) -> int:
        """Add entries at the end with one durable write; how many."""
        return append_entries(self._path, entries, self._quarantine)

    # --- the write path's queries (writer lock held)

    def _data(self) -> bytes:
        return _read_bytes(self._path)

    def count(self) -> int:
        """How many lines hold an entry or are kept as they are (blank lines aside): what L5's
        size is measured in (the auto-dream trigger)."""
        return store_scan.count(self._data())

    def holds(self, entry_id: str) -> bool:
        """Whether an entry with this id is in the store."""
        return bool(store_scan.rows_of(self._data(), entry_id))

    def row(self, entry_id: str) -> Row | None:
        """The row of this id, or None. L5: its one line (UsageError naming the id when it is
        on more than one line: a duplicate is never resolved by guessing); L6, where an id has
        one line per time it left L5: the last one, which says why and when it last left."""
        data = self._data()
        return store_scan.active_row(data, entry_id) if self._unique else store_scan.last_row(data, entry_id)

    def current(self, type_name: str, topic: str) -> Row | None:
        """L5: the active row with this merge key (type, normalized topic), the last one in
        file order if several; UsageError when its id is on more than one line."""
        return store_scan.current(self._data(), type_name, topic)

    def candidates(self, type_name: str, text: str, cutoff: float = 0.0) -> list[Row]:
        """L5: the rows of this type that could be near-duplicates of `text`, in file order
        (ties in the similarity ranking go to the earlier row). `cutoff` (the similarity the
        caller will require, 0-100) lets the store leave out rows that cannot reach it: only a
        length bound is applied (`policies.reachable_lengths`), never a guess, so the caller's
        rapidfuzz check over these rows finds what it would find over every row of the type.
        The rows' `text` is always there; `raw` and `entry` may be read only when asked for.
        (The brief named `candidates(type, text)`; `cutoff` is the one addition: without it
        the store cannot bound anything.)"""
        return store_scan.candidates(self._data(), type_name, text, cutoff)

    def replace(self, entry_id: str, new_row: Row, at_end: bool = False) -> None:
        """L5: this id's one line replaced by `new_row`, in one atomic write, every other line
        byte for byte as it was. `at_end`: the old line goes and the new row becomes the last
        one (a supersede: the newest version is last, as an append would put it). UsageError if
        the id is not on exactly one line."""
        atomic_write_bytes(self._path, store_scan.replaced(self._data(), entry_id, new_row, at_end))

    def remove(self, entry_ids: Iterable[str]) -> None:
        """L5: the lines of these ids dropped, in one atomic write (a forget); every other line
        byte for byte as it was. (Not in the brief's list: a forget of several ids must be one
        write, or a crash between two would leave half of it.)"""
        atomic_write_bytes(self._path, store_scan.without(self._data(), set(entry_ids)))

    def rewrite(self, rows: list[Row]) -> Snapshot:
        """Replace the store with these rows, atomically."""
        return write_rows(self._path, rows)

    def length(self) -> int:
        """Bytes now: a journal's point to cut back to."""
        return _length(self._path)

    def cut_back(self, length: int) -> bool:
        """Undo appends made since the store was `length` bytes long (a rolled-back step)."""
        return _cut_back(self._path, length)

    def settle(self) -> int:
        """Move a torn last line aside (writer lock held); its length."""
        return quarantine_torn_tail(self._path, self._quarantine)

    def digest(self) -> str:
        """sha256 of the bytes now: whether a journaled rewrite happened."""
        return bytes_digest(_read_bytes(self._path))


def bytes_digest(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def refuse_duplicates(rows: list[Row], ids: Iterable[str], what: str) -> None:
    """A duplicate id is never resolved by dropping one of its texts: refuse, naming it."""
    wanted = set(ids)
    seen: set[str] = set()
    for row in rows:
        if row.entry is not None and row.entry.id in wanted:
            if row.entry.id in seen:
                raise store_scan.duplicate_error(row.entry.id, what)
            seen.add(row.entry.id)


def duplicate_ids(rows: list[Row]) -> set[str]:
    seen: set[str] = set()
    twice = set()
    for row in rows:
        if row.entry is not None:
            (twice if row.entry.id in seen else seen).add(row.entry.id)
    return twice


class JsonlEntryStore:
    """L5 (`active`), L6 (`archive`) and the dream log as JSON Lines files under the root."""

    def __init__(self, layout: Layout) -> None:
        self._quarantine = torn_dir(layout.state_dir)
        self.active = EntryFile(layout.long_term, self._quarantine, unique_ids=True)
        self.archive = EntryFile(layout.cold_archive, self._quarantine, unique_ids=False)
        self._log = layout.dream_log

    def settle(self) -> list[str]:
        """Move torn last lines of L5, L6 and the log aside (writer lock held, before any write)."""
        moved = [(f.location, f.settle()) for f in (self.active, self.archive)]
        moved.append((str(self._log), quarantine_torn_tail(self._log, self._quarantine)))
        return [f"{where}: torn last line ({size} bytes) moved to {self._quarantine}" for where, size in moved if size]

    # --- the stored form of one entry

    def row_for(self, entry: Entry) -> Row:
        return row_for(entry)

    def stored_form(self, entry: Entry) -> bytes:
        """What `Row.raw` is for this entry once written."""
        return entry_line(entry)

    def row_from_record(self, record: dict) -> Row:
        """The row an audit record's copy of an entry came from (byte for byte)."""
        return Row((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"), Entry.from_dict(record))

    def record_of(self, row: Row) -> dict:
        """An entry's stored form as the audit log keeps it."""
        return json.loads(row.raw)

    def departed(self) -> dict[str, Entry]:
        """Ids not in L5, each with its last L6 line (why and when it left)."""
        active = self.active.ids()
        last: dict[str, Entry] = {}
        for entry in self.archive.iter():
            if entry.id not in active:
                last[entry.id] = entry
        return last

    def gone_for_good(self, text: str, cutoff: float = 0.0) -> list[Entry]:
        """L6 entries whose last line says forgotten or purged and which are not active
        again, among them every one that carries the fingerprint of `text` (a purge keeps
        `sha256` = `content_hash(text)`) and every one whose text could be a near-duplicate of
        `text` (the length bound of `candidates`, with the same `cutoff`). For each id the line
        returned is its last forgotten or purged line (a purged line wins: its text is gone).
        Order: ids with a forgotten line by their first one, then ids only purged."""
        from memctl.longterm.entries import content_hash

        return store_scan.gone_for_good(self.active._data(), self.archive._data(), text, content_hash(text), cutoff)

    def departed_entry(self, entry_id: str) -> Entry | None:
        """The last L6 line of an id that is not in L5 (why and when it left), or None: it is
        active, or it was never in L6. What `restore` puts back."""
        if self.active.holds(entry_id):
            return None
        row = self.archive.row(entry_id)
        return row.entry if row is not None else None

    # --- the dream log: one JSON record a change

    @property
    def log_location(self) -> str:
        return str(self._log)

    @property
    def log_name(self) -> str:
        return self._log.name

    def append_log(self, records: list[dict]) -> None:
        if records:
            payload = b"".join((json.dumps(r, ensure_ascii=False) + "\n").encode() for r in records)
            append_lines(self._log, payload, self._quarantine)

    def log_length(self) -> int:
        return _length(self._log)

    def cut_log_back(self, length: int) -> bool:
        return _cut_back(self._log, length)

    def log_records(self) -> list[dict]:
        """Every record, oldest first; a line that does not parse, or torn, is skipped."""
        out = []
        for raw in split_torn(_read_bytes(self._log))[0].splitlines():
            try:
                out.append(json.loads(raw))
            except ValueError:
                continue
        return out

    def scrub_log(self, ids: set[str], needles: list[bytes], scrub: Callable[[dict], dict]) -> bool:
        """Rewrite the log when it mentions any of these ids or strings: every record through
        `scrub`, and a line that does not parse dropped if it holds a string. False: untouched."""
        data = _read_bytes(self._log)
        if not any(i.encode() in data for i in ids) and not _holds_any(data, needles):
            return False
        out = []
        for raw in data.splitlines(keepends=True):
            try:
                record = json.loads(raw)
            except ValueError:
                if not _holds_any(raw, needles):
                    out.append(raw)
                continue
            out.append((json.dumps(scrub(record), ensure_ascii=False) + "\n").encode())
        atomic_write_bytes(self._log, b"".join(out))
        return True


def open_store(layout: Layout) -> JsonlEntryStore:
    """The entry store of a memory root."""
    return JsonlEntryStore(layout)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _length(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _cut_back(path: Path, length: int) -> bool:
    """Truncate to `length` if the file is longer (what was appended after it goes)."""
    import os

    from memctl.core.fsutil import NOFOLLOW

    if _length(path) <= length:
        return False
    fd = os.open(path, os.O_RDWR | NOFOLLOW)
    try:
        os.ftruncate(fd, length)
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _holds_any(data: bytes, needles: list[bytes]) -> bool:
    return any(n in data for n in needles)
