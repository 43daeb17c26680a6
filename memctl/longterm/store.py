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
see whether an entry is still what was planned. A `StoreRead` is one read of L5 or L6,
queried several times under one lock hold (remember's short path).
The caller holds the writer lock for every write.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterable, Iterator

from memctl.core.config import Layout
from memctl.core.errors import UsageError
from memctl.core.fsutil import StagedFile, atomic_write_bytes
from memctl.core.jsonl import append_lines, quarantine_torn_tail, split_torn, torn_dir
from memctl.longterm.entries import (
    Entry,
    Row,
    Snapshot,
    append_entries,
    bad_lines,
    entries_with,
    entry_line,
    field_bytes,
    file_stamp,
    iter_entries,
    parse_rows,
    read_snapshot,
    row_for,
    rows_bytes,
    texts_of_type,
    write_rows,
)


STAGED_SUFFIX = ".staged"


class StoreRead:
    """One read of L5 or L6, queried several times under one lock hold (remember's short path)."""

    def __init__(self, data: bytes) -> None:
        self._data = split_torn(data)[0]  # a torn last line is not an entry

    def count(self) -> int:
        data = self._data
        return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)

    def holds(self, entry_id: str) -> bool:
        return field_bytes("id", entry_id) in self._data

    def rows_of_type(self, type_name: str) -> list[Row]:
        """Every row; only those of this type are parsed (the others keep entry None)."""
        return parse_rows(self._data, field_bytes("type", type_name))

    def rows_around(self, entry_id: str) -> list[Row]:
        """Every row; only the one holding this id is parsed."""
        return parse_rows(self._data, field_bytes("id", entry_id))

    def texts_of_type(self, type_name: str) -> list[tuple[str, str]]:
        """(id, text) of every entry of one type."""
        return texts_of_type(self._data, type_name)

    def last_left_as(self, reasons: tuple[str, ...]) -> dict[str, Entry]:
        """For each id with a line giving one of these reasons, the last such line (a later
        reason in `reasons` wins over an earlier one)."""
        last: dict[str, Entry] = {}
        for reason in reasons:
            for entry in entries_with(self._data, field_bytes("reason", reason)):
                if entry.reason in reasons:
                    last[entry.id] = entry
        return last

    def last_line_gives(self, entry_id: str, reasons: tuple[str, ...]) -> bool:
        """Whether the last line about this id gives one of these reasons."""
        data = self._data
        final = data.rfind(field_bytes("id", entry_id))
        end = data.find(b"\n", final)
        line = data[data.rfind(b"\n", 0, final) + 1: end if end >= 0 else len(data)]
        return any(field_bytes("reason", reason) in line for reason in reasons)


class EntryFile:
    """One store of entries, L5 or L6, as a JSON Lines file."""

    def __init__(self, path: Path, quarantine: Path) -> None:
        self._path = path
        self._quarantine = quarantine

    @property
    def location(self) -> str:
        """Where it is, for the purge report."""
        return str(self._path)

    def read(self) -> StoreRead:
        try:
            return StoreRead(self._path.read_bytes())
        except FileNotFoundError:
            return StoreRead(b"")

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

    def encode(self, entries: Iterable[Entry]) -> bytes:
        """Entries as `append_encoded` takes them: encoded ahead of a lock hold."""
        return b"".join(entry_line(e) for e in entries)

    def append_encoded(self, payload: bytes) -> None:
        if payload:
            append_lines(self._path, payload, self._quarantine)

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

    def appended_since(self, snapshot: Snapshot) -> bytes | None:
        """What was appended since `snapshot` was read (b"": nothing changed), or None when the
        store changed otherwise (rewritten, cut, edited) — told apart without reading it all."""
        now = file_stamp(self._path)
        before = snapshot.stamp
        if before is None or now is None:
            return None
        if now == before:
            return b""
        if now[0] != before[0] or now[1] <= before[1]:
            return None
        data = _read_bytes(self._path)
        if not data.startswith(snapshot.data):  # an edit in place that also grew it (a few ms to tell)
            return None
        tail = data[before[1]:]
        return tail if tail.endswith(b"\n") else None

    def stage_rewrite(self, rows: list[Row]) -> StagedRewrite:
        """The store's next contents written beside it now, put in place later (`commit`)."""
        return StagedRewrite(self._path, rows)

    def remove_staged(self) -> int:
        """Remove staged rewrites a killed run left (their owner holds the dream lock); how many."""
        removed = 0
        for leftover in self._path.parent.glob(f".{self._path.name}.*{STAGED_SUFFIX}"):
            if leftover.is_file() and not leftover.is_symlink():
                leftover.unlink(missing_ok=True)
                removed += 1
        return removed


class StagedRewrite:
    """A rewrite of L5 or L6 prepared outside the writer lock: its bytes are on disk beside the
    store and hashed, so that under the lock only what was appended meanwhile is added."""

    def __init__(self, path: Path, rows: list[Row]) -> None:
        import hashlib

        self.rows = rows
        self.data = rows_bytes(rows)
        self._hash = hashlib.sha256(self.data)
        # not `.tmp`: every writer sweeps those at its start, and this one outlives a lock hold
        self._staged = StagedFile(path, self.data, suffix=STAGED_SUFFIX)
        self._path = path

    def present(self) -> bool:
        """Still on disk (nobody removed it meanwhile)."""
        return self._staged.present()

    def digest_with(self, tail: bytes) -> str:
        """sha256 of the store once committed with `tail` appended."""
        digest = self._hash.copy()
        digest.update(tail)
        return digest.hexdigest()

    def commit(self, tail: bytes) -> Snapshot:
        self._staged.put_in_place(tail)
        return Snapshot(self._path, self.data + tail, self.rows + parse_rows(tail), file_stamp(self._path))

    def discard(self) -> None:
        self._staged.discard()


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
                raise UsageError(f"{row.entry.id} is on more than one line of {what}; nothing was changed "
                                 "(give one of the lines a new id, then rerun)")
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
        self.active = EntryFile(layout.long_term, self._quarantine)
        self.archive = EntryFile(layout.cold_archive, self._quarantine)
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

    # --- the dream log: one JSON record a change

    @property
    def log_location(self) -> str:
        return str(self._log)

    @property
    def log_name(self) -> str:
        return self._log.name

    def append_log(self, records: list[dict]) -> None:
        self.append_log_encoded(self.encode_log(records))

    def encode_log(self, records: list[dict]) -> bytes:
        return b"".join((json.dumps(r, ensure_ascii=False) + "\n").encode() for r in records)

    def append_log_encoded(self, payload: bytes) -> None:
        if payload:
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
