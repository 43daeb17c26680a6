"""What both backends of the entry store share: one read of L5 or L6 queried several times
(`StoreRead`), an entry's stored form (`EntryForms`), and the checks over rows.

`memctl.longterm.store` (JSON Lines files) and `memctl.longterm.pg_store` (PostgreSQL rows)
are built on this module; the rest of memctl imports these names from `store`.
"""

from __future__ import annotations

import json
from typing import Callable, Iterable, Sequence

from memctl.core.errors import UsageError
from memctl.longterm.entries import Entry, Row, entries_with, entry_line, field_bytes, parse_rows, row_for, texts_of_type
from memctl.core.jsonl import split_torn


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
        return self._rows(field_bytes("type", type_name))

    def rows_around(self, entry_id: str) -> list[Row]:
        """Every row; only the one holding this id is parsed."""
        return self._rows(field_bytes("id", entry_id))

    def _rows(self, wanted: bytes) -> list[Row]:
        return parse_rows(self._data, wanted)

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


class LazyRow(Row):
    """A candidate row: its id known, its line read only when `raw` or `entry` is asked for."""

    def __init__(self, entry_id: str, load: Callable[[], Row]) -> None:
        self._id, self._load, self._row = entry_id, load, None

    def _loaded(self) -> Row:
        if self._row is None:
            self._row = self._load()
        return self._row

    raw = property(lambda self: self._loaded().raw)
    entry = property(lambda self: self._loaded().entry)
    entry_id = property(lambda self: self._id)


class Candidates(Sequence):
    """What `candidates` returns: a sequence of rows, each built when it is asked for (tens of
    thousands at a large L5, of which the caller needs one), and `keys`, their texts'
    `policies.match_key` in order (what `policies.best_key_match` compares)."""

    def __init__(self, found: list[tuple], load: Callable[..., Row] | None) -> None:
        self._found = found  # (id, key, offset, length) from the lookups, or (id, key, row) from a scan
        self._load = load

    @property
    def keys(self) -> list[str]:
        return [item[1] for item in self._found]

    def __len__(self) -> int:
        return len(self._found)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        item = self._found[index]
        if self._load is None:
            return item[2]
        entry_id, _, offset, length = item
        return LazyRow(entry_id, lambda: self._load(entry_id, offset, length))


class EntryForms:
    """The stored form of one entry, the same on every backend (a line of JSON, `Row.raw`),
    and what a writer asks of any backend before it writes."""

    on_server = False  # True: every write is one server transaction (nothing to journal)

    def lock_types(self, types: Iterable[str]) -> None:
        """Before reading what a write of these types depends on (the near-duplicate and merge
        checks): files need nothing beyond the writer lock; a server queues writers per type."""

    def row_for(self, entry: Entry) -> Row:
        return row_for(entry)

    def stored_form(self, entry: Entry) -> bytes:
        """What `Row.raw` is for this entry once written."""
        return entry_line(entry)

    def row_from_record(self, record: dict) -> Row:
        """The row an audit record's copy of an entry came from (byte for byte)."""
        return Row((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"), Entry.from_dict(record))

    def departed_entry(self, entry_id: str) -> Entry | None:
        """The last L6 entry of an id that is not in L5 (why and when it left), or None: it is
        active, or it was never in L6. What `restore` puts back."""
        if self.active.holds(entry_id):
            return None
        row = self.archive.row(entry_id)
        return row.entry if row is not None else None

    def log_line(self, record: dict) -> bytes:
        """One dream-log record as it is stored."""
        return (json.dumps(record, ensure_ascii=False) + "\n").encode()

    def log_records(self) -> list[dict]:
        """Every dream-log record, oldest first; a line that does not parse, or torn, is skipped."""
        out = []
        for _, raw in self.log_lines():
            try:
                out.append(json.loads(raw))
            except ValueError:
                continue
        return out

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
