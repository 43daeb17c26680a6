"""The L5 and L6 entry stores: `long_term.jsonl` and `archive.jsonl`, one JSON entry a line.

This module owns the entry format (design.md §6) and the JSON Lines primitives: a line per
entry, raw-line rows and snapshots, the cheap byte-level reads. `memctl.longterm.store` is
built on them and is the one interface the rest of memctl reaches L5, L6 and the dream log
through. Unknown fields are kept as they are, so a newer memctl's entries survive an older one.

L6 is append-only: an entry that leaves L5 gets a new L6 line (with `left_at`, `reason`,
`run`); `restore` puts it back in L5 without touching L6. An id's state is therefore: active
if it is in L5, else whatever its *last* L6 line says. Only `forget --purge` and
`dream --undo` (which removes exactly the lines its run added) rewrite L6.

The reference log `.memctl/refs.log` is how search tells the dream pass that an entry was
used, without taking the lock: one line per hit, `<ISO time>\t<entry id>\n`, appended with a
single `O_APPEND` write (see `memctl.longterm.refs`). Extra tab-separated fields after the id are
allowed and ignored. The dream pass folds new lines into `refs`/`last_ref` and remembers how
far it read in `.memctl/refs.offset`; it counts lines inside a window for the forget rule.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs ~3 ms of every write process
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, Iterable, Iterator

from memctl.core import jsoncodec
from memctl.core.fsutil import atomic_write_bytes
from memctl.longterm.ids import new_id  # noqa: F401  (the entry format's ids; kept apart for the resident writer's client)
from memctl.core.config import STATE_DIR
from memctl.core.jsonl import append_lines, split_torn, torn_dir
from memctl.core.paths import join, parent


class Entry:
    """One entry of L5 or L6. A plain class with slots rather than a dataclass: `dataclasses`
    pulls in inspect, ast and dis (~9 ms), and every `remember` process loads this module.
    It behaves as the dataclass did: keyword or positional fields in this order, equality by
    value, `replace(**changes)` for `dataclasses.replace`, and a dream's L5 in memory costs
    ~1 KB less per entry than without slots."""

    __slots__ = ("id", "text", "type", "topic", "confidence", "refs", "last_ref", "created", "updated",
                 "source", "seen",
                 # provenance of imported items (conversation turns, messages)
                 "date", "session", "speaker",
                 # links
                 "supersedes", "merged_from", "consolidated_from",
                 # L6 only: why and when the entry left L5, and which run moved it
                 "left_at", "reason", "run",
                 # a short human note: the rule that moved it to L6, or "3× verified" on a consolidation
                 "note", "extra")
    __hash__ = None  # mutable, compared by value (as the dataclass was)

    def __init__(self, id: str, text: str, type: str = "event", topic: str = "", confidence: float = 5,
                 refs: int = 0, last_ref: str = "", created: str = "", updated: str = "", source: str = "",
                 seen: int = 1, date: str = "", session: str = "", speaker: str = "",
                 supersedes: list[str] | None = None, merged_from: list[str] | None = None,
                 consolidated_from: list[str] | None = None, left_at: str = "", reason: str = "", run: str = "",
                 note: str = "", extra: dict[str, Any] | None = None) -> None:
        self.id, self.text, self.type, self.topic, self.confidence = id, text, type, topic, confidence
        self.refs, self.last_ref, self.created, self.updated, self.source = refs, last_ref, created, updated, source
        self.seen, self.date, self.session, self.speaker = seen, date, session, speaker
        self.supersedes = [] if supersedes is None else supersedes
        self.merged_from = [] if merged_from is None else merged_from
        self.consolidated_from = [] if consolidated_from is None else consolidated_from
        self.left_at, self.reason, self.run, self.note = left_at, reason, run, note
        self.extra = {} if extra is None else extra

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in Entry.__slots__)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __repr__(self) -> str:
        return "Entry(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in Entry.__slots__) + ")"

    def replace(self, **changes: Any) -> "Entry":
        """A copy with these fields changed (what `dataclasses.replace` did: the lists and
        `extra` are shared with the original unless given)."""
        values = {name: getattr(self, name) for name in Entry.__slots__}
        values.update(changes)
        return Entry(**values)

    def to_dict(self) -> dict[str, Any]:
        data = {}
        for name in _FIELD_ORDER:
            value = getattr(self, name)
            if value not in ("", [], None):
                data[name] = list(value) if type(value) is list else value
        data.update(self.extra)
        for required in ("id", "type", "text"):
            data[required] = getattr(self, required)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Entry":
        _check_fields(data)
        known = _KNOWN_FIELDS
        if known.issuperset(data) and "id" in data and "text" in data:
            return cls(**data)
        kwargs = {k: v for k, v in data.items() if k in known}
        extra = {k: v for k, v in data.items() if k not in known}
        if "id" not in kwargs or "text" not in kwargs:
            raise ValueError("an entry needs at least 'id' and 'text'")
        return cls(**kwargs, extra=extra)


_FIELD_ORDER = Entry.__slots__[:-1]  # every field but `extra`
_KNOWN_FIELDS = frozenset(_FIELD_ORDER)
_NUMBER_FIELDS = {"confidence": (int, float), "refs": (int,), "seen": (int,)}
_LIST_FIELDS = frozenset({"supersedes", "merged_from", "consolidated_from"})
PURGED = "purged"  # the reason of an L6 line whose text a purge erased
# what a line that is not an entry raises (RecursionError: JSON nested thousands deep)
BAD_LINE = (ValueError, TypeError, AttributeError, RecursionError)


def _check_fields(data: Any) -> None:
    """A line is an entry only if every known field has its type (`text: null`, `topic: 3`
    and `refs: "many"` are not entries; the line is skipped, never rewritten)."""
    if not isinstance(data, dict):
        raise ValueError("an entry is a JSON object")
    for name, value in data.items():
        if name in _NUMBER_FIELDS:
            ok = isinstance(value, _NUMBER_FIELDS[name]) and not isinstance(value, bool) and value == value \
                and abs(value) < 1e15
        elif name in _LIST_FIELDS:
            ok = isinstance(value, list) and all(isinstance(item, str) for item in value)
        else:
            ok = name not in _KNOWN_FIELDS or isinstance(value, str)
        if not ok:
            raise ValueError(f"field {name!r} has the wrong type")
    if not data.get("id"):
        raise ValueError("an entry needs a non-empty 'id'")


def entry_line(entry: Entry) -> bytes:
    return (jsoncodec.dumps(entry.to_dict()) + "\n").encode("utf-8")


def iter_entries(path: Path) -> Iterator[Entry]:
    """Entries of a store; a line that does not parse is skipped (the file is never rewritten
    here), and so is a torn last line (no newline): it is not an entry, `verify` reports it."""
    if not os.path.exists(path):
        return
    with open(path, "rb") as handle:
        for raw in handle:
            if not raw.endswith(b"\n"):
                return
            raw = raw.strip()
            if not raw:
                continue
            try:
                yield Entry.from_dict(jsoncodec.loads(raw))
            except BAD_LINE:
                continue


def bad_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, what is wrong) for every non-blank line of a store that is not an entry:
    the lines every reader skips and every rewrite keeps as they are."""
    found = []
    for number, raw in iter_nonblank_lines(path):
        problem = entry_problem(raw)
        if problem:
            found.append((number, problem))
    return found


def iter_nonblank_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of every non-blank line of a store, none if it is missing: the
    numbers of `bytes.splitlines` over the whole file (a bare CR ends a line), one line held at
    a time — every write command checks L5 and
    L6 this way until the write lookups vouch for them, and a million-entry L5 read whole and
    split held ~600 MB (issue #31)."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return
    number = 0
    with handle:
        for piece in handle:  # each piece ends at a newline: `splitlines` of each is that of the whole
            for raw in piece.splitlines() if b"\r" in piece else (piece.rstrip(b"\n"),):
                number += 1
                if raw.strip():
                    yield number, raw


def count_nonblank_lines(path: Path) -> int:
    """How many non-blank lines a store has, streamed (no copy of a large file in memory)."""
    try:
        with open(path, "rb") as handle:
            return sum(1 for raw in handle if raw.strip())
    except FileNotFoundError:
        return 0


def entry_problem(raw: bytes | dict) -> str | None:
    """Why a line (or its parsed object) is not an entry, or None when it is one."""
    import json  # for its error class: verify's path, not a write's

    try:
        Entry.from_dict(jsoncodec.loads(raw) if isinstance(raw, bytes) else raw)
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except json.JSONDecodeError:
        return "not JSON"
    except RecursionError:
        return "JSON nested too deeply"
    except BAD_LINE as exc:
        return str(exc) or "not an entry"
    return None


def load_entries(path: Path) -> list[Entry]:
    return list(iter_entries(path))


def append_entries(path: Path, entries: Iterable[Entry], quarantine: Path | None = None) -> int:
    """Append entries with one durable write (the caller holds the writer lock); a torn last
    line is moved to `quarantine` first (memctl.core.jsonl; default: the root's .memctl/torn/)."""
    payload = b"".join(entry_line(e) for e in entries)
    if payload:
        append_lines(path, payload, quarantine or torn_dir(join(parent(path), STATE_DIR)))
    return payload.count(b"\n")


def write_entries(path: Path, entries: Iterable[Entry]) -> None:
    """Replace a store atomically (the caller holds the writer lock)."""
    atomic_write_bytes(path, b"".join(entry_line(e) for e in entries))


# --- raw-line snapshots: rewrite a store without touching the bytes of lines we did not change


class Row:
    """One line of a store: its exact bytes (newline included) and the entry it holds."""

    __hash__ = None  # no slots: the server store tags each row with its `seq`

    def __init__(self, raw: bytes, entry: Entry | None) -> None:
        self.raw = raw
        self.entry = entry  # None: a line that does not parse, kept as it is

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (self.raw, self.entry) == (other.raw, other.entry)

    def __repr__(self) -> str:
        return f"Row(raw={self.raw!r}, entry={self.entry!r})"

    @property
    def text(self) -> str:
        return self.entry.text if self.entry is not None else ""

    @property
    def entry_id(self) -> str | None:
        return self.entry.id if self.entry is not None else None


class LeanRow(Row):
    """A row that keeps only its line and its id, and parses the entry each time it is asked
    for (a parsed entry costs about 1 KB beside its line): how a dream holds all of L5
    (`read_snapshot(lean=True)`). Read `entry` once per use; each read is a new object."""

    def __init__(self, raw: bytes, entry_id: str) -> None:
        self.raw, self._id = raw, entry_id

    entry = property(lambda self: Entry.from_dict(jsoncodec.loads(self.raw)))
    entry_id = property(lambda self: self._id)


class Snapshot:
    """A store as read at one moment; `data` lets a later reader see whether it only grew.
    A lean snapshot (`data` None) keeps instead the size and sha256 of what was read."""

    def __init__(self, path: Path, data: bytes | None, rows: list[Row], stamp: tuple | None = None,
                 size: int = 0, digest: str = "", whole: bool = True) -> None:
        self.path, self.data, self.rows = path, data, rows
        self.stamp = stamp  # (inode, size, mtime_ns) of what was read: unchanged since, without reading
        self.size, self.digest, self.whole = size, digest, whole  # lean: bytes read, their sha256, ends whole

    @property
    def entries(self) -> list[Entry]:
        return [r.entry for r in self.rows if r.entry is not None]

    def by_id(self) -> dict[str, Row]:
        return {r.entry.id: r for r in self.rows if r.entry is not None}

    @property
    def length(self) -> int:
        return self.size if self.data is None else len(self.data)

    def ends_whole(self) -> bool:
        return self.whole if self.data is None else self.data[-1:] in (b"", b"\n")

    def begins(self, data: bytes) -> bool:
        """Whether `data` starts with the bytes this snapshot was read from."""
        if self.data is not None:
            return data.startswith(self.data)
        import hashlib

        return len(data) >= self.size and hashlib.sha256(memoryview(data)[:self.size]).hexdigest() == self.digest


def lean_snapshot(path: Path, rows: list[Row], stamp: tuple | None, size: int, digest: str, whole: bool) -> Snapshot:
    return Snapshot(path, None, rows, stamp, size, digest, whole)


def parse_rows(data: bytes, wanted: bytes | None = None, lean: bool = False) -> list[Row]:
    """Rows of a store. With `wanted`, only lines containing those bytes are parsed; the others
    keep entry None and are written back as they are (a cheap read for one type). `lean`: each
    entry's row a `LeanRow`. A torn last line (no newline) is never parsed: it is kept as a row
    without an entry."""
    data, torn = split_torn(data)
    rows = _lean_lines(data) if lean else _parse_lines(data, wanted)
    if torn.strip():
        rows.append(Row(torn + b"\n", None))
    return rows


def _lines(data: bytes) -> Iterator[bytes]:
    """The lines that are not blank, each ending in a newline."""
    for raw in data.splitlines(keepends=True):
        if raw.strip():
            yield raw if raw.endswith(b"\n") else raw + b"\n"


def _lean_lines(data: bytes) -> list[Row]:
    rows: list[Row] = []
    for raw in _lines(data):
        try:
            rows.append(LeanRow(raw, Entry.from_dict(jsoncodec.loads(raw)).id))
        except BAD_LINE:
            rows.append(Row(raw, None))
    return rows


def _parse_lines(data: bytes, wanted: bytes | None) -> list[Row]:
    if wanted is None:
        fast = _parse_all(data)
        if fast is not None:
            return fast
    rows = []
    for raw in _lines(data):
        if wanted is not None and wanted not in raw:
            rows.append(Row(raw, None))
            continue
        try:
            entry = Entry.from_dict(jsoncodec.loads(raw))
        except BAD_LINE:
            entry = None
        rows.append(Row(raw, entry))
    return rows


_SCAN = jsoncodec.scanner()  # json.loads's own C scanner, without its per-call work
_JSON_SPACE = " \t\n\r"


def _parse_all(data: bytes) -> list[Row] | None:
    """Every line parsed alone by the C scanner (a big L5 reads twice as fast as through
    json.loads per line); None when a line needs the careful path (bad JSON, not plain UTF-8, a
    BOM...), which then decides line by line. Not one json call over the lines joined by commas:
    a line that leaves an array open (`{"k": [{"a": 1}`) would take the next line in, another
    holding two objects would split, and every row after them would get another line's entry."""
    rows = []
    for raw in _lines(data):
        try:
            text = raw.decode("utf-8")
            value, end = _SCAN(text, len(text) - len(text.lstrip(_JSON_SPACE)))
            if text[end:].strip(_JSON_SPACE):
                return None
            rows.append(Row(raw, Entry.from_dict(value)))
        except (StopIteration, UnicodeDecodeError) + BAD_LINE:
            return None
    return rows


def _lines_with(text, marker):
    """The lines of `text` (str or bytes) that contain `marker`, found with str.find, so the
    lines without it cost nothing in Python."""
    newline = "\n" if isinstance(text, str) else b"\n"
    pos = text.find(marker)
    while pos >= 0:
        start = text.rfind(newline, 0, pos) + 1
        end = text.find(newline, pos)
        end = len(text) if end < 0 else end
        yield text[start:end]
        pos = text.find(marker, end)


def entries_with(data: bytes, marker: bytes) -> list[Entry]:
    """Entries of the lines holding `marker` (e.g. field_bytes("reason", "forgotten"))."""
    out = []
    for line in _lines_with(data, marker):
        try:
            out.append(Entry.from_dict(jsoncodec.loads(line)))
        except BAD_LINE:
            continue
    return out


def field_bytes(name: str, value: str) -> bytes:
    """How `"name": "value"` appears in a line memctl wrote (json.dumps default separators)."""
    return f"{jsoncodec.dumps(name, ascii=True)}: {jsoncodec.dumps(value)}".encode("utf-8")


def read_snapshot(path: Path, previous: Snapshot | None = None, lean: bool = False) -> Snapshot:
    """Read a store; when it only grew since `previous`, parse just the appended lines.
    `lean`: rows that keep only their lines and ids, and no copy of the bytes read."""
    data, stamp = read_stamped(path)
    grew = previous is not None and previous.ends_whole() and previous.begins(data)
    if grew:
        rows = list(previous.rows) + parse_rows(data[previous.length:], lean=lean)
    else:
        rows = parse_rows(data, lean=lean)
    if lean:
        import hashlib

        return lean_snapshot(path, rows, stamp, len(data), hashlib.sha256(data).hexdigest(),
                             data[-1:] in (b"", b"\n"))
    return Snapshot(path, data, rows, stamp)


def file_stamp(path: Path) -> tuple | None:
    """(inode, size, mtime_ns) of a store now; None when missing. A rewrite is a new inode."""
    try:
        info = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def read_stamped(path: Path) -> tuple[bytes, tuple | None]:
    """The bytes of a store and the stamp they match (None when they may not: read again)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        return b"", None
    try:
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read()
        info = os.fstat(fd)
    finally:
        os.close(fd)
    stamp = (info.st_ino, info.st_size, info.st_mtime_ns) if info.st_size == len(data) else None
    return data, stamp


def row_for(entry: Entry) -> Row:
    return Row(entry_line(entry), entry)


def rows_bytes(rows: Iterable[Row]) -> bytes:
    return b"".join(r.raw for r in rows)


def write_rows(path: Path, rows: list[Row]) -> Snapshot:
    """Replace a store atomically with these rows (the caller holds the writer lock)."""
    data = rows_bytes(rows)
    atomic_write_bytes(path, data)
    return Snapshot(path, data, list(rows))


def content_hash(text: str) -> str:
    from memctl.core.digest import sha256_hex

    return "sha256:" + sha256_hex(text.encode("utf-8", "surrogateescape"))

