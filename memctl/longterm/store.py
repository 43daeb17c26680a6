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

import contextlib
import json
from pathlib import Path
from typing import Callable, Iterator

from memctl.core.config import Layout, Settings, load_settings
from memctl.core.errors import UsageError
from memctl.core.fsutil import atomic_write_bytes
from memctl.core.jsonl import append_lines, quarantine_torn_tail, split_torn, torn_dir
from memctl.longterm.entries import (
    Entry,
    Row,
    Snapshot,
    append_entries,
    bad_lines,
    iter_entries,
    read_snapshot,
    write_rows,
)
from memctl.longterm.store_base import (  # noqa: F401  (the names callers import from here)
    EntryForms,
    StoreRead,
    bytes_digest,
    duplicate_ids,
    refuse_duplicates,
)


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


class JsonlEntryStore(EntryForms):
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

    # --- the dream log: one JSON record a change

    @property
    def log_location(self) -> str:
        return str(self._log)

    @property
    def log_name(self) -> str:
        return self._log.name

    def append_log(self, records: list[dict]) -> None:
        if records:
            payload = b"".join(self.log_line(r) for r in records)
            append_lines(self._log, payload, self._quarantine)

    def log_length(self) -> int:
        return _length(self._log)

    def cut_log_back(self, length: int) -> bool:
        return _cut_back(self._log, length)

    def log_lines(self) -> list[tuple[int, bytes]]:
        """(line number, line) of every whole line."""
        whole = split_torn(_read_bytes(self._log))[0]
        return list(enumerate(whole.splitlines(keepends=True), start=1))

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Around reads that must agree with each other (export): the files need nothing."""
        yield

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
            out.append(self.log_line(scrub(record)))
        atomic_write_bytes(self._log, b"".join(out))
        return True


def open_store(layout: Layout, settings: Settings | None = None) -> JsonlEntryStore:
    """The entry store of a memory root: its files, or its schema on the server when
    `[store] backend = "postgres"` (`memctl.longterm.pg_store`, the same methods)."""
    if settings is None:
        settings = load_settings(layout.root)
    if settings.get("store", "backend") == "postgres":
        from memctl.longterm.pg_store import open_server_store

        return open_server_store(settings)
    return JsonlEntryStore(layout)


def export_to(store, folder: Path) -> list[str]:
    """Write L5, L6 and the dream log of `store` into `folder` as the file backend keeps them
    (each replaced atomically); the files written."""
    target = JsonlEntryStore(Layout(Path(folder)))
    with store.reading():
        active, archive, log = store.active.snapshot().rows, store.archive.snapshot().rows, store.log_lines()
    target.active.rewrite(active)
    target.archive.rewrite(archive)
    atomic_write_bytes(target._log, b"".join(raw for _, raw in log))
    return [target.active.location, target.archive.location, target.log_location]


def load_files(store, folder: Path) -> dict[str, int]:
    """Load the L5, L6 and dream log files of a file memory in `folder` into a server store,
    adding only what it does not hold yet (`PostgresEntryStore.load_rows`)."""
    source = JsonlEntryStore(Layout(Path(folder)))
    snapshots = [source.active.snapshot(), source.archive.snapshot()]
    for snapshot in snapshots:
        if snapshot.data and not snapshot.data.endswith(b"\n"):
            raise UsageError(f"{snapshot.path} ends in a torn line; run `memctl --root {folder} verify --repair` "
                             "first, then load it again")
    return store.load_rows(snapshots[0].rows, snapshots[1].rows, [raw for _, raw in source.log_lines()])


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
