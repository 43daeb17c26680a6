"""L5 as a dream holds it (issue #31, a dream of a million entries in bounded memory): every
line's offset, length and id in flat arrays, its bytes left in the file and read again by
offset when a rule or a step needs them, the file kept open so that they stay readable after
a step renamed a new L5 over it.

`read_lean` reads L5 in chunks (the sha256 a later reader compares computed on the way);
unchanged since a previous snapshot (inode, size, mtime), nothing is read; only grown, only
the new lines are. `StagedLean` writes a step's new L5 beside L5 as a stream of the lines
kept, changed and added, and is the new snapshot once put in place. `ListRows` gives a
snapshot held as a list of rows (the server's, or `plan` over entries) the same reads.
"""

from __future__ import annotations

import os
from array import array

from memctl.core import jsoncodec
from memctl.core.fsutil import StagedFile, pread
from memctl.longterm.entries import BAD_LINE, Entry, LeanRow, Row, Snapshot, file_stamp, lean_snapshot, rows_bytes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable, Iterator

CHUNK = 4 << 20  # bytes read or written at a time
_NOT_ENTRY = -1
# what a line that can hold a `supersedes`, `contradicts` or `topic` key holds (a key may be
# spelled with a `\\u` escape): the dream parses only these lines to find its links
LINK_MARKERS = (b'"supersedes"', b'"contradicts"', b'"topic"', b"\\u")


class _File:
    """An open file read by offset; closed with the last snapshot that reads it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self, offset: int, length: int) -> bytes:
        data = pread(self.fd, length, offset)
        while len(data) < length:  # a short read continues; a file cut under us ends it
            more = pread(self.fd, length - len(data), offset + len(data))
            if not more:
                raise OSError(f"L5 ended before byte {offset + length} while a dream read it")
            data += more
        return data

    def __del__(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


def _appended(numbers: array, value: int) -> array:
    """`numbers` with `value` appended, widened to 8 bytes an item when it does not fit."""
    try:
        numbers.append(value)
    except OverflowError:
        numbers = array("q", numbers)
        numbers.append(value)
    return numbers


class LeanRows:
    """The rows of one file, by position: offset, length and id of each, nothing else held."""

    lean = True

    def __init__(self, file: _File | None) -> None:
        self.file = file
        self.offsets = array("q")
        self.lengths = array("I")  # 4 bytes a row (a million rows, three views at once), "q" past 4 GiB
        self._ids = bytearray()  # every entry's id, UTF-8, one after the other
        self._id_starts = array("I")  # where each row's id starts in it (the same)
        self._id_sizes = array("i")  # its length; _NOT_ENTRY: a line that is not an entry
        self._odd: dict[int, bytes] = {}  # lines whose bytes are not the file's (torn, a bare CR)
        self._links = bytearray()  # per row: 1 when its line may hold a link (LINK_MARKERS)

    def copy(self) -> "LeanRows":
        other = LeanRows(self.file)
        other.offsets, other.lengths = array("q", self.offsets), array(self.lengths.typecode, self.lengths)
        other._ids, other._odd, other._links = bytearray(self._ids), dict(self._odd), bytearray(self._links)
        other._id_starts = array(self._id_starts.typecode, self._id_starts)
        other._id_sizes = array("i", self._id_sizes)
        return other

    def add(self, offset: int, raw: bytes, entry_id: str | None, odd: bool = False) -> None:
        if odd:
            self._odd[len(self.offsets)] = raw
        self.offsets.append(offset)
        self.lengths = _appended(self.lengths, len(raw))
        self._links.append(entry_id is not None and any(marker in raw for marker in LINK_MARKERS))
        self._id_starts = _appended(self._id_starts, len(self._ids))
        if entry_id is None:
            self._id_sizes.append(_NOT_ENTRY)
        else:
            encoded = entry_id.encode("utf-8", "surrogatepass")
            self._ids += encoded
            self._id_sizes.append(len(encoded))

    def __len__(self) -> int:
        return len(self.offsets)

    def entry_mask(self, start: int = 0) -> bytes:
        """One byte a row from `start` on: 1 for an entry's line, 0 for a line that is not one."""
        return bytes(size != _NOT_ENTRY for size in self._id_sizes[start:])

    def is_entry(self, position: int) -> bool:
        return self._id_sizes[position] != _NOT_ENTRY

    def has_odd_lines(self) -> bool:
        """Whether a row's bytes are not the file's (torn, split at a bare CR): a rewrite changes them."""
        return bool(self._odd)

    def id_at(self, position: int) -> str | None:
        size = self._id_sizes[position]
        if size == _NOT_ENTRY:
            return None
        start = self._id_starts[position]
        return self._ids[start:start + size].decode("utf-8", "surrogatepass")

    def ids(self) -> Iterator[tuple[int, str | None]]:
        """(position, id or None) of every row, in order."""
        ids, starts = self._ids, self._id_starts
        for position, size in enumerate(self._id_sizes):
            if size == _NOT_ENTRY:
                yield position, None
            else:
                start = starts[position]
                yield position, ids[start:start + size].decode("utf-8", "surrogatepass")

    def twice(self) -> set[str]:
        """The ids on two lines or more: their hashes sorted in runs of flat arrays first, so
        that only the few that hash alike are compared as strings."""
        import heapq

        runs: list[array] = []
        for start in range(0, len(self), 1 << 19):
            hashes = sorted(hash(i) for _, i in _ids_between(self, start, start + (1 << 19)) if i is not None)
            runs.append(array("q", hashes))
        alike, last = set(), None
        for value in heapq.merge(*runs):
            if value == last:
                alike.add(value)
            last = value
        del runs
        if not alike:
            return set()
        seen: set[str] = set()
        twice: set[str] = set()
        for _, entry_id in self.ids():
            if entry_id is not None and hash(entry_id) in alike:
                (twice if entry_id in seen else seen).add(entry_id)
        return twice

    def may_link(self, position: int) -> bool:
        return bool(self._links[position])

    def entry_lines(self) -> Iterator[tuple[int, str, bytes]]:
        """(position, id, line) of every entry, in order, read in chunks."""
        for (position, entry_id), raw in zip(self.ids(), self.raws()):
            if entry_id is not None:
                yield position, entry_id, raw

    @staticmethod
    def parse(position: int, raw: bytes) -> Entry:
        return Entry.from_dict(jsoncodec.loads(raw))

    def raw_at(self, position: int) -> bytes:
        odd = self._odd.get(position)
        return odd if odd is not None else self.file.read(self.offsets[position], self.lengths[position])

    def entry_at(self, position: int) -> Entry | None:
        if self._id_sizes[position] == _NOT_ENTRY:
            return None
        return Entry.from_dict(jsoncodec.loads(self.raw_at(position)))

    def row_at(self, position: int) -> Row:
        entry_id = self.id_at(position)
        raw = self.raw_at(position)
        return Row(raw, None) if entry_id is None else LeanRow(raw, entry_id)

    def raws(self) -> Iterator[bytes]:
        """Every row's bytes in order, read in chunks of the file."""
        position, count = 0, len(self)
        while position < count:
            start = self.offsets[position]
            last = position
            while last + 1 < count and self.offsets[last + 1] - start < CHUNK and last + 1 not in self._odd \
                    and position not in self._odd:
                last += 1
            if position in self._odd:
                yield self._odd[position]
                position += 1
                continue
            block = self.file.read(start, self.offsets[last] + self.lengths[last] - start)
            for k in range(position, last + 1):
                begin = self.offsets[k] - start
                yield block[begin:begin + self.lengths[k]]
            position = last + 1

    def __iter__(self) -> Iterator[Row]:
        for (position, entry_id), raw in zip(self.ids(), self.raws()):
            yield Row(raw, None) if entry_id is None else LeanRow(raw, entry_id)

    def __getitem__(self, position: int) -> Row:
        if position < 0:
            position += len(self)
        if not 0 <= position < len(self):
            raise IndexError(position)
        return self.row_at(position)


class ListRows:
    """The same reads over rows held as a list (a server snapshot, or `plan` over entries)."""

    lean = False

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def id_at(self, position: int) -> str | None:
        return self.rows[position].entry_id

    def ids(self) -> Iterator[tuple[int, str | None]]:
        return ((position, row.entry_id) for position, row in enumerate(self.rows))

    def raw_at(self, position: int) -> bytes:
        return self.rows[position].raw

    def twice(self) -> set[str]:
        seen: set[str] = set()
        twice: set[str] = set()
        for row in self.rows:
            if row.entry_id is not None:
                (twice if row.entry_id in seen else seen).add(row.entry_id)
        return twice

    def entry_lines(self) -> Iterator[tuple[int, str, bytes]]:
        return ((k, row.entry_id, row.raw) for k, row in enumerate(self.rows) if row.entry is not None)

    def parse(self, position: int, raw: bytes) -> Entry:
        return self.rows[position].entry

    def entry_at(self, position: int) -> Entry | None:
        return self.rows[position].entry

    def row_at(self, position: int) -> Row:
        return self.rows[position]


def _ids_between(rows: LeanRows, start: int, end: int) -> Iterator[tuple[int, str | None]]:
    for position in range(start, min(end, len(rows))):
        yield position, rows.id_at(position)


def view_of(rows) -> LeanRows | ListRows:
    return rows if isinstance(rows, (LeanRows, ListRows)) else ListRows(rows)


def _entry_id(raw: bytes) -> str | None:
    try:
        return Entry.from_dict(jsoncodec.loads(raw)).id
    except BAD_LINE:
        return None


def _add_lines(rows: LeanRows, data: bytes, offset: int) -> None:
    """The rows of whole lines `data` (each ending in a newline) found at `offset`: the lines
    `entries.parse_rows(lean=True)` makes of them, blank ones skipped, a bare CR splitting a
    line as `bytes.splitlines` does."""
    start = 0
    while start < len(data):
        end = data.index(b"\n", start) + 1
        line = data[start:end]
        if b"\r" in line:
            at = offset + start
            for part in line.splitlines(keepends=True):
                if part.strip():
                    whole = part if part.endswith(b"\n") else part + b"\n"
                    rows.add(at, whole, _entry_id(whole), odd=whole is not part)
                at += len(part)
        elif line.strip():
            rows.add(offset + start, line, _entry_id(line))
        start = end


def _read_from(fd: int, rows: LeanRows, start: int, digest) -> tuple[int, bool]:
    """Add the rows of the file from byte `start` on (the bytes before it already hashed into
    `digest`); the file's size as read, and whether it ends with a whole line. A torn last line
    is a row without an entry."""
    carry = b""
    at = start
    while True:
        chunk = pread(fd, CHUNK, at)
        if not chunk:
            break
        digest.update(chunk)
        block = carry + chunk
        cut = block.rfind(b"\n") + 1
        _add_lines(rows, block[:cut], at - len(carry))
        carry = block[cut:]
        at += len(chunk)
    if carry.strip():
        rows.add(at - len(carry), carry + b"\n", None, odd=True)
    return at, not carry


def _hash_prefix(fd: int, size: int, digest) -> None:
    at = 0
    while at < size:
        chunk = pread(fd, min(CHUNK, size - at), at)
        if not chunk:
            break
        digest.update(chunk)
        at += len(chunk)


def read_lean(path, previous: Snapshot | None = None) -> Snapshot:
    """A lean snapshot of the store at `path` (rows: `LeanRows`)."""
    import hashlib

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        return lean_snapshot(path, LeanRows(None), None, 0, hashlib.sha256().hexdigest(), True)
    file = _File(fd)
    info = os.fstat(fd)
    stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
    old = previous.rows if previous is not None and isinstance(previous.rows, LeanRows) else None
    if old is not None and previous.stamp == stamp:
        return previous  # not changed since: nothing to read
    digest = hashlib.sha256()
    rows = LeanRows(file)
    start = 0
    if old is not None and previous.stamp is not None and previous.stamp[0] == stamp[0] \
            and previous.ends_whole() and stamp[1] > previous.size:
        _hash_prefix(fd, previous.size, digest)
        if digest.hexdigest() == previous.digest:
            rows = old.copy()
            rows.file = file
            start = previous.size
        else:
            digest = hashlib.sha256()
    size, whole = _read_from(fd, rows, start, digest)
    after = os.fstat(fd)
    stamp = (after.st_ino, after.st_size, after.st_mtime_ns) if after.st_size == size else None
    return lean_snapshot(path, rows, stamp, size, digest.hexdigest(), whole)


def prefix_matches(path, snapshot: Snapshot) -> bool:
    """Whether the store at `path` still begins with the bytes `snapshot` was read from
    (hashed in chunks: a lean snapshot keeps no copy of them)."""
    import hashlib

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        return False
    try:
        digest = hashlib.sha256()
        _hash_prefix(fd, snapshot.size, digest)
        return digest.hexdigest() == snapshot.digest
    finally:
        os.close(fd)


class Rewrite:
    """A step's new L5 over a lean snapshot: the rows of `rows` but those `removed`, those
    `replaced` (position -> new line) changed in place, then the `added` lines."""

    def __init__(self, rows: LeanRows, removed: set[int], replaced: dict[int, bytes],
                 added: list[tuple[str, bytes]]) -> None:
        self.rows, self.removed, self.replaced, self.added = rows, removed, replaced, added

    def lines(self) -> Iterator[tuple[str | None, bytes]]:
        for (position, entry_id), raw in zip(self.rows.ids(), self.rows.raws()):
            if position in self.removed:
                continue
            yield entry_id, self.replaced.get(position, raw)
        yield from self.added


class StagedLean:
    """`StagedRewrite` for a lean rewrite: the new L5 streamed beside L5 in chunks, its
    rows (offsets, ids) recorded on the way, so neither the old nor the new bytes are held."""

    def __init__(self, path, rewrite: Rewrite, suffix: str) -> None:
        import hashlib

        self._path = path
        self._rows = LeanRows(None)
        self._hash = hashlib.sha256()
        self._size = 0
        self._staged = StagedFile(path, self._chunks(rewrite.lines()), suffix=suffix)
        self._file = _File(self._staged.open_for_reading())

    def _chunks(self, lines: Iterable[tuple[str | None, bytes]]) -> Iterator[bytes]:
        pending: list[bytes] = []
        held = 0
        for entry_id, raw in lines:
            self._rows.add(self._size, raw, entry_id)
            self._size += len(raw)
            pending.append(raw)
            held += len(raw)
            if held >= CHUNK:
                yield self._hashed(pending)
                pending, held = [], 0
        if pending:
            yield self._hashed(pending)

    def _hashed(self, pieces: list[bytes]) -> bytes:
        block = b"".join(pieces)
        self._hash.update(block)
        return block

    def present(self) -> bool:
        """Still on disk (nobody removed it meanwhile)."""
        return self._staged.present()

    def digest_with(self, tail: bytes) -> str:
        """sha256 of the store once committed with `tail` appended."""
        digest = self._hash.copy()
        digest.update(tail)
        return digest.hexdigest()

    def commit(self, tail: bytes, tail_rows: list[Row] | None = None) -> Snapshot:
        """Put the new L5 in place with `tail` (appended meanwhile) after it."""
        self._staged.put_in_place(tail)
        rows = self._rows
        rows.file = self._file
        if tail:
            _add_lines(rows, tail, self._size)
        return lean_snapshot(self._path, rows, file_stamp(self._path), self._size + len(tail),
                             self.digest_with(tail), True)

    def discard(self) -> None:
        self._staged.discard()


class StagedRewrite(StagedLean):
    """A rewrite of L5 or L6 prepared outside the writer lock: its bytes are on disk beside the
    store and hashed, so that under the lock only what was appended meanwhile is added. Its
    bytes are not kept once written: the snapshot it commits is lean (size and sha256). (A
    dream's steps stream theirs: `StagedLean`.)"""

    def __init__(self, path, rows: list[Row], suffix: str) -> None:
        import hashlib

        self.rows = rows
        data = rows_bytes(rows)
        self._size = len(data)
        self._hash = hashlib.sha256(data)
        # not `.tmp`: every writer sweeps those at its start, and this one outlives a lock hold
        self._staged = StagedFile(path, data, suffix=suffix)
        self._path = path

    def commit(self, tail: bytes, tail_rows: list[Row]) -> Snapshot:
        """Put the staged rows in place with `tail` (its rows: `tail_rows`) appended."""
        self._staged.put_in_place(tail)
        # every row's line and the tail end with a newline: the store ends with a whole line
        return lean_snapshot(self._path, self.rows + tail_rows, file_stamp(self._path), self._size + len(tail),
                             self.digest_with(tail), True)
