"""The one append primitive of every JSON Lines file memctl keeps, and the torn-tail rules.

A record is acknowledged only once it is whole on disk: `append_lines` (the caller holds the
writer lock) takes the file's length, moves a torn last line — bytes after the last newline,
left by a writer killed mid-append or stopped by a full disk — to `.memctl/torn/` and cuts
it off, then writes the records with one write, fsyncs, and only then returns. If the disk
refuses the write, the file is cut back to the length it had and `WriteFailed` says that
nothing was written (SQLite's and PostgreSQL's WAL: a torn tail is detected, never glued
onto). `append_unlocked` is the lock-free variant for search's reference log: it cannot cut
the file safely, so it starts on a fresh line instead.

Readers use `split_torn`: a last line without its newline is torn, never parsed as a record.
Kept free of json, typing and dataclasses: the search path appends references through it.

Callers: the entry store (L5, L6, the dream log), the import journal, the reference log
(`append_unlocked`). Not yet the L4 manifest: `memctl.l4.manifest.append_records` should call
`append_lines(layout.manifest, payload, torn_dir(layout.state_dir))` in place of its
`_ensure_ends_with_newline` + `append_durably` (which keeps the torn line in the file, as an
unparseable line, rather than aside); left to the L4 rewrite, as is `all_histories.txt`.
"""

from __future__ import annotations

import contextlib
import os
import time

from memctl.core.fsutil import (defer_sync, ensure_private_dir, is_disk_error, open_nofollow, pread, sync_pending,
                                write_all, write_failed)
from memctl.core.paths import join, name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Iterable, Iterator

TORN_DIR = "torn"
_TAIL_CHUNK = 1 << 16


def torn_dir(state_dir: Path) -> Path:
    """Where torn and unparseable lines are kept (`.memctl/torn/`)."""
    return join(state_dir if isinstance(state_dir, str) else _path(state_dir), TORN_DIR)


def _path(path) -> Path:
    from pathlib import Path

    return Path(path)


def split_torn(data: bytes) -> tuple[bytes, bytes]:
    """(the complete lines, the torn last line or b"")."""
    end = data.rfind(b"\n") + 1
    return data[:end], data[end:]


def append_lines(path: Path, payload: bytes, quarantine: Path) -> int:
    """Append whole lines durably; returns the file's length before them (for a rollback).
    A torn last line is first moved to `quarantine`. Raises WriteFailed, the file as it was."""
    if payload and not payload.endswith(b"\n"):
        raise ValueError("append_lines takes whole lines")
    return append_line_chunks(path, (payload,) if payload else None, quarantine)


def append_line_chunks(path: Path, chunks: Iterable[bytes | memoryview] | None, quarantine: Path) -> int:
    """`append_lines` of lines that come in chunks, each ending with a whole line (a dream
    step's L6 copies, read back from a scratch file): one open, one torn-tail check, one
    fsync. If the disk refuses any chunk, the file is cut back to its length before the first.
    None: nothing to append (the torn tail is still moved aside)."""
    sync_pending()
    fd = open_nofollow(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    try:
        start = _cut_torn_tail(fd, path, quarantine)
        if chunks is not None and _write_or_restore(fd, path, _whole_lines(chunks), start):
            fd = None  # fsynced and closed when the writer lock is released
        return start
    finally:
        if fd is not None:
            os.close(fd)


def _whole_lines(chunks: Iterable[bytes | memoryview]) -> Iterator[bytes | memoryview]:
    for chunk in chunks:
        if len(chunk) and chunk[-1:] != b"\n":
            raise ValueError("append_line_chunks takes chunks of whole lines")
        yield chunk


def append_unlocked(path: Path, payload: bytes) -> None:
    """Append whole lines in one O_APPEND write without the lock and without fsync (a lost
    line only delays something); after a torn tail the lines start on a fresh line."""
    fd = open_nofollow(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    try:
        size = os.fstat(fd).st_size
        if size and pread(fd, 1, size - 1) != b"\n":
            payload = b"\n" + payload
        write_all(fd, payload)
    finally:
        os.close(fd)


def quarantine_torn_tail(path: Path, quarantine: Path) -> int:
    """Move a torn last line of `path` to `quarantine` (writer lock held); its length, 0 if none."""
    try:
        fd = open_nofollow(path, os.O_RDWR)
    except FileNotFoundError:
        return 0
    try:
        size = os.fstat(fd).st_size
        return size - _cut_torn_tail(fd, path, quarantine)
    finally:
        os.close(fd)


def keep_aside(quarantine: Path, source: Path, offset: int, data: bytes) -> Path:
    """Write bytes taken out of `source` at `offset` to a file of their own in `quarantine`."""
    from memctl.core.fsutil import atomic_write_bytes

    ensure_private_dir(quarantine)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    target = join(quarantine, f"{name(source)}.{offset}.{stamp}.{os.getpid()}.torn")
    atomic_write_bytes(target, data)
    return target


def _cut_torn_tail(fd: int, path: Path, quarantine: Path) -> int:
    """The length of the complete lines; a torn tail after them is kept aside, then cut off."""
    size = os.fstat(fd).st_size
    if not size or pread(fd, 1, size - 1) == b"\n":
        return size
    start = _last_line_start(fd, size)
    keep_aside(quarantine, path, start, pread(fd, size - start, start))
    try:
        os.ftruncate(fd, start)
        os.fsync(fd)
    except OSError as exc:
        if is_disk_error(exc):
            raise write_failed(path, exc) from None
        raise
    return start


def _last_line_start(fd: int, size: int) -> int:
    end = size
    while end > 0:
        begin = max(0, end - _TAIL_CHUNK)
        found = pread(fd, end - begin, begin).rfind(b"\n")
        if found >= 0:
            return begin + found + 1
        end = begin
    return 0


def _write_or_restore(fd: int, path: Path, pieces: Iterable[bytes], start: int) -> bool:
    """Write the pieces in order, then fsync them — or leave that to the lock's release
    (group commit, `fsutil.synced_after_unlock`; True: `fd` was handed over and stays open)."""
    try:
        for piece in pieces:
            if piece:
                write_all(fd, piece)
        if defer_sync(fd, path):
            return True
        os.fsync(fd)
        return False
    except (OSError, ValueError) as exc:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)
            os.fsync(fd)
        if isinstance(exc, OSError) and is_disk_error(exc):
            raise write_failed(path, exc) from None
        raise
