"""What both backends of the entry store share: an entry's stored form (`EntryForms`), the
write path's candidate rows (`Candidates`, `LazyRow`), and the checks over rows.

`memctl.longterm.store` (JSON Lines files) and `memctl.longterm.pg_store` (PostgreSQL rows)
are built on this module; the rest of memctl imports these names from `store`.
"""

from __future__ import annotations

from collections.abc import Sequence

TYPE_CHECKING = False  # typing costs ~3 ms of every write process
if TYPE_CHECKING:
    from typing import Callable, Iterable

from memctl.core import jsoncodec
from memctl.longterm.entries import Entry, Row, entry_line, row_for


class LazyRow(Row):
    """A candidate row: its line (and, when not given, its id) read only when asked for."""

    def __init__(self, entry_id: str | None, load: Callable[[], Row]) -> None:
        self._id, self._load, self._row = entry_id, load, None

    def _loaded(self) -> Row:
        if self._row is None:
            self._row = self._load()
        return self._row

    raw = property(lambda self: self._loaded().raw)
    entry = property(lambda self: self._loaded().entry)
    entry_id = property(lambda self: self._id if self._id is not None else self._loaded().entry.id)


class Candidates(Sequence):
    """What `candidates` returns: a sequence of rows, each built when it is asked for (tens of
    thousands at a large L5, of which the caller needs one), and `keys`, their texts'
    `policies.match_key` in order (what `policies.best_key_match` compares)."""

    def __init__(self, found: list[tuple] | None, load: Callable[[int], Row] | None = None,
                 keys: list[str] | None = None) -> None:
        """`found`: (id, key, row) of each candidate (a scan, the server); or `keys` alone, in
        order, and `load(index)` reading the row of one of them (the write lookups)."""
        self._found = found
        self._load = load
        self._keys = keys

    @property
    def keys(self) -> list[str]:
        return self._keys if self._keys is not None else [item[1] for item in self._found]

    def __len__(self) -> int:
        return len(self._keys) if self._keys is not None else len(self._found)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if self._keys is None:
            return self._found[index][2]
        position = range(len(self._keys))[index]  # IndexError and negative indexes as a list's
        return LazyRow(None, lambda: self._load(position))


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
        return Row((jsoncodec.dumps(record) + "\n").encode("utf-8"), Entry.from_dict(record))

    def departed_entry(self, entry_id: str) -> Entry | None:
        """The last L6 entry of an id that is not in L5 (why and when it left), or None: it is
        active, or it was never in L6. What `restore` puts back."""
        if self.active.holds(entry_id):
            return None
        row = self.archive.row(entry_id)
        return row.entry if row is not None else None

    def log_line(self, record: dict) -> bytes:
        """One dream-log record as it is stored."""
        return (jsoncodec.dumps(record) + "\n").encode()

    def log_records(self) -> list[dict]:
        """Every dream-log record, oldest first; a line that does not parse, or torn, is skipped."""
        out = []
        for _, raw in self.log_lines():
            try:
                out.append(jsoncodec.loads(raw))
            except ValueError:
                continue
        return out

    def record_of(self, row: Row) -> dict:
        """An entry's stored form as the audit log keeps it."""
        return jsoncodec.loads(row.raw)

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



def duplicate_ids(rows: list[Row]) -> set[str]:
    seen: set[str] = set()
    twice = set()
    for row in rows:
        if row.entry_id is not None:
            (twice if row.entry_id in seen else seen).add(row.entry_id)
    return twice
