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

import contextlib
import os

from memctl.core import jsoncodec
from memctl.core.config import Layout, Settings, load_settings, store_backend
from memctl.core.errors import UsageError
from memctl.core.fsutil import atomic_write_bytes, refuse_symlink, sync_file
from memctl.core.jsonl import append_line_chunks, append_lines, quarantine_torn_tail, split_torn, torn_dir
from memctl.core.paths import name
from memctl.longterm.lookups import Lookups, entry_of, read_line
from memctl.longterm.policies import key_classes, match_key, reachable_lengths
from memctl.longterm.entries import (
    Entry,
    Row,
    Snapshot,
    append_entries,
    bad_lines,
    count_nonblank_lines,
    entry_line,
    entry_problem,
    file_stamp,
    iter_entries,
    iter_nonblank_lines,
    read_snapshot,
    write_rows,
)
from memctl.longterm.store_base import (  # noqa: F401  (the names callers import from here)
    Candidates,
    EntryForms,
    LazyRow,
    bytes_digest,
    duplicate_ids,
)

TYPE_CHECKING = False  # typing costs ~3 ms of every write process
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Callable, Iterable, Iterator
    from memctl.longterm.dream_rows import StagedLean, StagedRewrite


STAGED_SUFFIX = ".staged"


def _scan():
    """`memctl.longterm.store_scan`, loaded when the write lookups cannot answer (not on a write's usual path)."""
    from memctl.longterm import store_scan

    return store_scan


class EntryFile:
    """One store of entries, L5 or L6, as a JSON Lines file."""

    def __init__(self, path: Path, quarantine: Path, unique_ids: bool, lookups: Lookups | None = None,
                 which: str = "") -> None:
        self._path = path
        self._quarantine = quarantine
        self._unique = unique_ids  # L5: one line an id; L6: one line each time it left L5
        self._lookups = lookups
        self._which = which  # its name in the lookups

    @property
    def location(self) -> str:
        """Where it is, for the purge report."""
        return str(self._path)

    def snapshot(self, previous: Snapshot | None = None, lean: bool = False) -> Snapshot:
        """Every row now; when the store only grew since `previous`, only the new ones are parsed.
        `lean` (a dream's read of all of L5): each line's offset, length and id only
        (`memctl.longterm.dream_rows`)."""
        if lean:
            from memctl.longterm.dream_rows import read_lean

            return read_lean(self._path, previous)
        return read_snapshot(self._path, previous, lean)

    def iter(self) -> Iterator[Entry]:
        return iter_entries(self._path)

    def of_types(self, type_names: Iterable[str]) -> list[Entry]:
        """The entries of these types, only their lines parsed (compose's profile and
        preferences: a few hundred lines of a large L5)."""
        from memctl.longterm.entries import entries_with, field_bytes

        data = split_torn(self._data())[0]
        return [e for t in type_names for e in entries_with(data, field_bytes("type", t)) if e.type == t]

    def bad_lines(self, quick: bool = False) -> list[tuple[str, int, str]]:
        """(file name, line number, problem) of each line that is not an entry (skipped, kept).
        `quick` (a write command's warning, no lock needed): none, without reading the file,
        when the write lookups are current with it and saw no such line."""
        if quick and self._lookups is not None and self._lookups.clean(self._which):
            return []
        return [(name(self._path), number, problem) for number, problem in bad_lines(self._path)]

    def prepare_rewrite(self, rewrite):
        """What keeps the write lookups in step with a dream's rewrite (`lookups_rewrite`), made
        before the lock: None when there are no lookups to keep."""
        from memctl.longterm.lookups import enabled

        if self._lookups is None or not enabled():
            return None
        from memctl.longterm.lookups_rewrite import Prepared

        return Prepared(rewrite.rows, rewrite.removed, rewrite.replaced, rewrite.added)

    def lookups_follow(self) -> bool:
        """Whether the write lookups are current with the file now, caught up when it only
        grew, never rebuilt (writer lock held)."""
        return self._lookups is not None and self._lookups.follows(self._which)

    def follow_rewrite(self, prepared, written_rows) -> None:
        """After a rewrite whose lookups were current before it: they follow it (or are dropped)."""
        from memctl.longterm.lookups_rewrite import follow

        follow(self._lookups, self._path, prepared, written_rows)

    def follow_appends(self, prepared, base: int) -> None:
        """After a dream step appended its prepared lines at `base`, the lookups current with the
        file before: they follow without reading the lines again (or are dropped)."""
        from memctl.longterm.lookups_rewrite import follow_appends

        follow_appends(self._lookups, self._path, base, prepared)

    def line_counts(self) -> tuple[int, int]:
        """(entries, lines that are not entries), blank lines aside: one read of the file, and
        no parse when the write lookups vouch that every line is an entry (`status`)."""
        if self._lookups is not None and self._lookups.clean(self._which):
            return count_nonblank_lines(self._path), 0
        good = bad = 0
        for _, raw in iter_nonblank_lines(self._path):  # streamed: `status` of a million-entry L5
            if entry_problem(raw):
                bad += 1
            else:
                good += 1
        return good, bad

    def entries(self) -> list[Entry]:
        return list(self.iter())

    def ids(self) -> set[str]:
        return {e.id for e in self.iter()}

    def sync(self) -> None:
        """fsync the file: lines another process wrote and did not sync become durable."""
        sync_file(self._path)

    def append(self, entries: Iterable[Entry]) -> int:
        """Add entries at the end with one durable write; how many."""
        added = append_entries(self._path, entries, self._quarantine)
        self._view()  # the lookups catch up with the lines just written (a failure: next time)
        return added

    # --- the write path's queries (writer lock held): from the lookups when they are current
    # with the file (memctl.longterm.lookups), else from a scan of it (the same answers)

    def _data(self) -> bytes:
        return _read_bytes(self._path)

    def _view(self) -> Lookups | None:
        return self._lookups.view(self._which) if self._lookups is not None else None

    def count(self) -> int:
        """How many lines hold an entry or are kept as they are (blank lines aside): what L5's
        size is measured in (the auto-dream trigger)."""
        view = self._view()
        return view.count(self._which) if view is not None else _scan().count(self._data())

    def holds(self, entry_id: str) -> bool:
        """Whether an entry with this id is in the store."""
        view = self._view()
        if view is not None:
            return view.holds(self._which, entry_id)
        return bool(_scan().rows_of(self._data(), entry_id))

    def row(self, entry_id: str) -> Row | None:
        """The row of this id, or None. L5: its one line (UsageError naming the id when it is
        on more than one line: a duplicate is never resolved by guessing); L6, where an id has
        one line per time it left L5: the last one, which says why and when it last left."""
        view = self._view()
        if view is not None:
            spans = view.spans(self._which, entry_id)
            if self._unique and len(spans) > 1:
                raise _scan().duplicate_error(entry_id, "L5")
            if not spans:
                return None
            found = self._line_at(entry_id, spans[-1][1], spans[-1][2])
            if found is not None:
                return found
        data = self._data()
        return _scan().active_row(data, entry_id) if self._unique else _scan().last_row(data, entry_id)

    def _line_at(self, entry_id: str, offset: int, length: int) -> Row | None:
        """The row the lookups point at, or None (and the lookups dropped) when it is not it."""
        raw = read_line(self._path, offset, length)
        entry = entry_of(raw)
        if entry is not None and entry.id == entry_id and raw.endswith(b"\n"):
            return Row(raw, entry)
        self._lookups.drop(self._which)
        return None

    def current(self, type_name: str, topic: str) -> Row | None:
        """L5: the active row with this merge key (type, normalized topic), the last one in
        file order if several; UsageError when its id is on more than one line."""
        view = self._view()
        if view is not None:
            entry_id = view.current(type_name, topic)
            if entry_id is None:
                return None
            found = self.row(entry_id)
            if found is not None and found.entry.type == type_name:
                return found
        return _scan().current(self._data(), type_name, topic)

    def candidates(self, type_name: str, text: str, cutoff: float = 0.0) -> Candidates:
        """L5: the rows of this type that could be near-duplicates of `text`, in file order
        (ties in the similarity ranking go to the earlier row). `cutoff` (the similarity the
        caller will require, 0-100) lets the store leave out rows that cannot reach it: only
        exact bounds are applied (the key length, `policies.reachable_lengths`, and in the
        lookups the key's character-class counts, `policies.key_classes`), never a guess, so the
        caller's check over these rows finds what it would find over every row of the type.
        A sequence of rows (`Candidates`: `.keys` gives their texts' match keys at once); each
        row's `entry_id` is there, `raw` and `entry` may be read only when asked for. (The brief named `candidates(type, text)`; `cutoff` is the one addition:
        without it the store cannot leave anything out.)"""
        view = self._view()
        if view is not None:
            low, high = reachable_lengths(text, cutoff)
            key = match_key(text)
            bound = (key_classes(key), cutoff, len(key)) if cutoff > 0 else None
            keys = view.candidates(type_name, low, high, bound)
            return Candidates(None, lambda index: self._load(*view.candidate_line(type_name, low, high, index, bound)),
                              keys)
        rows = _scan().candidates(self._data(), type_name, text, cutoff)
        return Candidates([(r.entry.id, match_key(r.entry.text), r) for r in rows], None)

    def _load(self, entry_id: str, offset: int, length: int) -> Row:
        found = self._line_at(entry_id, offset, length)
        return found if found is not None else _scan().active_row(self._data(), entry_id)

    def replace(self, entry_id: str, new_row: Row, at_end: bool = False) -> None:
        """L5: this id's one line replaced by `new_row`, in one atomic write, every other line
        byte for byte as it was. `at_end`: the old line goes and the new row becomes the last
        one (a supersede: the newest version is last, as an append would put it). UsageError if
        the id is not on exactly one line."""
        data = self._data()
        view = self._view()
        spans = self._checked_spans(view, data, [entry_id])
        if spans is None:
            atomic_write_bytes(self._path, _scan().replaced(data, entry_id, new_row, at_end))
            return
        _, offset, length = spans[0]
        if at_end:
            new = data[:offset] + data[offset + length:] + new_row.raw
            added = (new_row.entry, len(new) - len(new_row.raw), len(new_row.raw), False)
        else:
            new = data[:offset] + new_row.raw + data[offset + length:]
            added = (new_row.entry, offset, len(new_row.raw), True)
        atomic_write_bytes(self._path, new)
        self._lookups.follow(self._path, spans, added)

    def remove(self, entry_ids: Iterable[str]) -> None:
        """L5: the lines of these ids dropped, in one atomic write (a forget); every other line
        byte for byte as it was. (Not in the brief's list: a forget of several ids must be one
        write, or a crash between two would leave half of it.)"""
        ids = list(dict.fromkeys(entry_ids))
        data = self._data()
        spans = self._checked_spans(self._view(), data, ids)
        if spans is None:
            atomic_write_bytes(self._path, _scan().without(data, set(ids)))
            return
        kept, last = [], 0
        for _, offset, length in sorted(spans, key=lambda span: span[1]):
            kept.append(data[last:offset])
            last = offset + length
        atomic_write_bytes(self._path, b"".join(kept) + data[last:])
        self._lookups.follow(self._path, spans, None)

    def _checked_spans(self, view, data: bytes, ids: list[str]) -> list[tuple[int, int, int]] | None:
        """(seq, offset, length) of the one line of each id, each checked against `data`;
        None: ask the scan (no lookups, or they do not match the file)."""
        if view is None:
            return None
        spans = []
        for entry_id in ids:
            found = view.spans(self._which, entry_id)
            if len(found) != 1:
                return None
            _, offset, length = found[0]
            entry = entry_of(data[offset:offset + length])
            if entry is None or entry.id != entry_id or data[offset + length - 1:offset + length] != b"\n":
                self._lookups.drop(self._which)
                return None
            spans.append(found[0])
        return spans

    def encode(self, entries: Iterable[Entry]) -> bytes:
        """Entries as `append_encoded` takes them: encoded ahead of a lock hold."""
        return b"".join(entry_line(e) for e in entries)

    def append_encoded(self, payload: bytes | Iterable[bytes]) -> None:
        """`append` of pre-encoded lines (or chunks of them: one write each, one fsync); the
        lookups catch up at the next write (a dream step calls this under the lock, where
        thousands of lines would cost it)."""
        _append_encoded(self._path, payload, self._quarantine)

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
        if snapshot.data is None:  # lean: the bytes read are hashed again in chunks, not held
            from memctl.longterm.dream_rows import prefix_matches

            if not prefix_matches(self._path, snapshot):
                return None
            tail = _read_bytes(self._path, before[1])
            return tail if tail.endswith(b"\n") else None
        data = _read_bytes(self._path)
        if not snapshot.begins(data):  # an edit in place that also grew it (a few ms to tell)
            return None
        tail = data[before[1]:]
        return tail if tail.endswith(b"\n") else None

    def stage_rewrite(self, rows: list[Row]) -> StagedRewrite:
        """The store's next contents written beside it now, put in place later (`commit`)."""
        from memctl.longterm.dream_rows import StagedRewrite

        return StagedRewrite(self._path, rows, STAGED_SUFFIX)

    def stage_lean_rewrite(self, rewrite) -> StagedLean:
        """`stage_rewrite` of a lean snapshot's rewrite (`dream_rows.Rewrite`), streamed."""
        from memctl.longterm.dream_rows import StagedLean

        return StagedLean(self._path, rewrite, STAGED_SUFFIX)

    def remove_staged(self) -> int:
        """Remove staged rewrites a killed run left (their owner holds the dream lock); how many."""
        removed = 0
        from pathlib import Path  # dream's cleanup, not a write's

        for leftover in Path(self._path).parent.glob(f".{name(self._path)}.*{STAGED_SUFFIX}"):
            if leftover.is_file() and not leftover.is_symlink():
                leftover.unlink(missing_ok=True)
                removed += 1
        return removed


def _append_encoded(path: Path, payload: bytes | Iterable[bytes], quarantine: Path) -> None:
    if isinstance(payload, (bytes, bytearray)):
        if payload:
            append_lines(path, payload, quarantine)
    else:
        append_line_chunks(path, payload, quarantine)


def entry_store_files(layout: Layout) -> tuple[Path, Path, Path]:
    """L5, L6 and the dream log: the files the entry store keeps (and follows no link at)."""
    return layout.long_term, layout.cold_archive, layout.dream_log


class JsonlEntryStore(EntryForms):
    """L5 (`active`), L6 (`archive`) and the dream log as JSON Lines files under the root."""

    def __init__(self, layout: Layout) -> None:
        # a planted link could point anywhere: no command reads (show, status, dream) or writes
        # through one; `verify` reports it
        refuse_symlink(*entry_store_files(layout))
        self._quarantine = torn_dir(layout.state_dir)
        self._lookups = Lookups(layout.state_dir, layout.lock, {"l5": layout.long_term, "l6": layout.cold_archive})
        self.active = EntryFile(layout.long_term, self._quarantine, True, self._lookups, "l5")
        self.archive = EntryFile(layout.cold_archive, self._quarantine, False, self._lookups, "l6")
        self._log = layout.dream_log

    def settle(self) -> list[str]:
        """Move torn last lines of L5, L6 and the log aside (writer lock held, before any write)."""
        moved = [(f.location, f.settle()) for f in (self.active, self.archive)]
        moved.append((str(self._log), quarantine_torn_tail(self._log, self._quarantine)))
        return [f"{where}: torn last line ({size} bytes) moved to {self._quarantine}" for where, size in moved if size]

    def gone_for_good(self, text: str, cutoff: float = 0.0) -> list[Entry]:
        """L6 entries whose last line says forgotten or purged and which are not active
        again, among them every one that carries the fingerprint of `text` (a purge keeps
        `sha256` = `content_hash(text)`) and every one whose text could be a near-duplicate of
        `text` (the length bound of `candidates`, with the same `cutoff`). For each id the line
        returned is its last forgotten or purged line (a purged line wins: its text is gone).
        Order: ids with a forgotten line by their first one, then ids only purged."""
        from memctl.longterm.entries import content_hash

        fingerprint = content_hash(text)
        if self.active._view() is not None and self.archive._view() is not None:
            low, high = reachable_lengths(text, cutoff)
            found = [(entry_id, self.archive._line_at(entry_id, offset, length))
                     for entry_id, offset, length in self._lookups.gone_for_good(fingerprint, low, high)]
            if all(row is not None for _, row in found):
                return [row.entry for _, row in found]
        return _scan().gone_for_good(self.active._data(), self.archive._data(), text, fingerprint, cutoff)

    # --- the dream log: one JSON record a change

    @property
    def log_location(self) -> str:
        return str(self._log)

    @property
    def log_name(self) -> str:
        return name(self._log)

    def append_log(self, records: list[dict]) -> None:
        self.append_log_encoded(self.encode_log(records))

    def encode_log(self, records: list[dict]) -> bytes:
        return b"".join(self.log_line(r) for r in records)

    def append_log_encoded(self, payload: bytes | Iterable[bytes]) -> None:
        _append_encoded(self._log, payload, self._quarantine)

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

    def scrub_log(self, ids: set[str], needles: list[bytes], scrub: Callable[[dict], dict]) -> bool:
        """Rewrite the log when it mentions any of these ids or strings: every record through
        `scrub`, and a line that does not parse dropped if it holds a string. False: untouched."""
        data = _read_bytes(self._log)
        if not any(i.encode() in data for i in ids) and not _holds_any(data, needles):
            return False
        out = []
        for raw in data.splitlines(keepends=True):
            try:
                record = jsoncodec.loads(raw)
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
    backend = settings.get("store", "backend") if settings is not None else store_backend(layout.root)
    if backend == "postgres":
        from memctl.longterm.pg_store import open_server_store

        return open_server_store(settings if settings is not None else load_settings(layout.root))
    return JsonlEntryStore(layout)


def export_to(store, folder: Path) -> list[str]:
    """Write L5, L6 and the dream log of `store` into `folder` as the file backend keeps them
    (each replaced atomically); the files written."""
    from pathlib import Path

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
    from pathlib import Path

    source = JsonlEntryStore(Layout(Path(folder)))
    snapshots = [source.active.snapshot(), source.archive.snapshot()]
    for snapshot in snapshots:
        if snapshot.data and not snapshot.data.endswith(b"\n"):
            raise UsageError(f"{snapshot.path} ends in a torn line; run `memctl --root {folder} verify --repair` "
                             "first, then load it again")
    return store.load_rows(snapshots[0].rows, snapshots[1].rows, [raw for _, raw in source.log_lines()])


def _read_bytes(path: Path, start: int = 0) -> bytes:
    try:
        with open(path, "rb") as handle:
            handle.seek(start)
            return handle.read()
    except FileNotFoundError:
        return b""


def _length(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _cut_back(path: Path, length: int) -> bool:
    """Truncate to `length` if the file is longer (what was appended after it goes)."""
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
