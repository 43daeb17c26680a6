"""Erasing strings for `forget --purge` from the raw logs memctl has not archived yet and from
their kept copies (`memctl.l4.kept`): both are searched where they lie, so both are memory.

The raw logs are GenericAgent's, in its folder, and a running GenericAgent may append to the
newest one at any moment (open, append, close; no lock). So a log is rewritten as a swap: its
scrubbed bytes go to a temp file beside it (fsynced, with the log's mode, owner and mtime); the
rename happens only if the log's inode, size and mtime are still those that were read (else
the swap is redone, a few times, then left pending); and bytes that reach the old file in the
instant between that check and the rename (or a moment after, by a writer that had opened it
before) are read back through the descriptor still open on it and appended, scrubbed.

After the rename the log is a new inode, and its kept hard link still names the old one. The
kept pass then keeps the scrubbed log under its new inode and drops the old copy, but only
once the log is seen to hold all of it (every line of the old copy, scrubbed) — the same test
settles a run cut off between the rename and the drop, and a copy that holds more (an append
that reached the old file after the swap) stays kept, scrubbed in place. A kept copy whose raw log is
gone is scrubbed in place. The caller holds the writer lock.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path

from memctl.core import faults
from memctl.core.config import Layout
from memctl.core.errors import MemctlError
from memctl.core.fsutil import NOFOLLOW, TMP_SUFFIX, fsync_dir, make_temp, pread, write_all
from memctl.l4.kept import NONBLOCK, RAW_PREFIX, KeptLog, drop_kept, keep_log, kept_dir, kept_logs, open_log, raw_logs
from memctl.l4.purge import _replace_all, _StreamingReplacer

SWAP_ATTEMPTS = 5  # a log that changes under every one of them is left pending
LATE_WATCH = (0.0, 0.05, 0.2)  # seconds between looks at the old file after a swap
_CHUNK = 1 << 20


class LogKeptChanging(MemctlError):
    """The raw log changed while each scrubbed copy of it was written."""


def purge_raw_logs(layout: Layout, raw_dir: Path, needles: list[bytes], mark: bytes, pending: list[str]) -> list[str]:
    """Scrub every raw log of `raw_dir` and every kept copy that holds a needle; one line per
    file rewritten. A file that cannot be rewritten now (a full disk, a log that kept changing)
    is noted in `pending` (`path: why`) and left whole; the others are still scrubbed."""
    if not needles:
        return []
    _sweep_swap_files(layout, raw_dir)
    done = []
    for path, _ in raw_logs(raw_dir):
        if _noting_pending(pending, path, lambda: scrub_in_place(path, needles, mark)):
            done.append(f"{path}: raw log not archived yet, scrubbed")
        faults.checkpoint("purge-raw-log")
    return done + _purge_kept(layout, raw_dir, needles, mark, pending)


def _noting_pending(pending: list[str], path: Path, step):
    """Run one file's scrub; what stops it (a full disk, a log GenericAgent keeps changing or
    does not let memctl rewrite) leaves that file pending and the purge going on."""
    try:
        return step()
    except FileNotFoundError:  # GenericAgent's own archiver took it meanwhile: its kept copy is scrubbed
        return False
    except LogKeptChanging as exc:
        pending.append(f"{path}: {exc}")
    except OSError as exc:
        pending.append(f"{path}: {(exc.strerror or type(exc).__name__).lower()}; left as it was")
    return False


def _purge_kept(layout: Layout, raw_dir: Path, needles: list[bytes], mark: bytes, pending: list[str]) -> list[str]:
    present = {path.name: (path, info) for path, info in raw_logs(raw_dir)}
    done = []
    for kept in kept_logs(layout):
        raw = present.get(kept.path.name)
        if raw is not None and kept.original_inode == raw[1].st_ino:
            continue  # the log itself, or its copy: scrubbed with it (pending with it)
        if said := _noting_pending(pending, kept.path, lambda: _settle_kept(layout, kept, raw, needles, mark)):
            done.append(f"{kept.path}: {said}")
        faults.checkpoint("purge-kept")
    return done


def _settle_kept(layout: Layout, kept: KeptLog, raw: tuple[Path, os.stat_result] | None, needles: list[bytes],
                 mark: bytes) -> str:
    """A kept copy under an inode its raw log no longer has: dropped when the log (kept under
    its own inode first) holds all of it, else scrubbed in place. What was done, or ''."""
    if raw is not None and holds_all_of(raw[0], kept.path, needles, mark):
        keep_log(layout, *raw)
        drop_kept(layout, kept.original_inode, kept.path.name)
        fsync_dir(kept_dir(layout))
        return "kept copy replaced by the scrubbed raw log's"
    return "kept copy of a raw log, scrubbed" if scrub_in_place(kept.path, needles, mark) else ""


def holds_all_of(raw: Path, kept: Path, needles: list[bytes], mark: bytes) -> bool:
    """Whether the raw log holds every line of the kept copy, scrubbed (as many times as the
    copy does). Lines, not a prefix: bytes GenericAgent appended in the instant of a swap were
    carried over after its next appends, so the log holds them in another order."""
    counts = _line_counts(raw)
    lacking = [False]

    def take(line: bytes) -> None:
        key = _line_key(line)
        if counts.get(key, 0) <= 0:
            lacking[0] = True
        counts[key] = counts.get(key, 0) - 1

    splitter = _LineSplitter(take)
    replacer = _StreamingReplacer(needles, mark, splitter.feed)
    with open(kept, "rb") as copy:
        while not lacking[0] and (chunk := copy.read(_CHUNK)):
            replacer.feed(chunk)
    replacer.close()
    splitter.close()
    return not lacking[0]


def _line_key(line: bytes) -> bytes:
    return hashlib.blake2b(line, digest_size=16).digest()


def _line_counts(path: Path) -> dict[bytes, int]:
    counts: dict[bytes, int] = {}

    def count(line: bytes) -> None:
        key = _line_key(line)
        counts[key] = counts.get(key, 0) + 1

    splitter = _LineSplitter(count)
    with open_log(path) as log:
        while chunk := log.read(_CHUNK):
            splitter.feed(chunk)
    splitter.close()
    return counts


class _LineSplitter:
    """Calls `each` with every line of a byte stream (its newline kept; the last may lack one)."""

    def __init__(self, each) -> None:
        self.each, self.rest = each, b""

    def feed(self, data: bytes) -> None:
        *lines, self.rest = (self.rest + data).split(b"\n")
        for line in lines:
            self.each(line + b"\n")

    def close(self) -> None:
        if self.rest:
            self.each(self.rest)
            self.rest = b""


def scrub_in_place(path: Path, needles: list[bytes], mark: bytes) -> bool:
    """Replace the needles in a file another program may be appending to (a swap, above);
    False when it holds none, or is no regular file."""
    for _ in range(SWAP_ATTEMPTS):
        fd = os.open(path, os.O_RDONLY | NOFOLLOW | NONBLOCK)  # a FIFO put in its place must not hang the purge
        try:
            read = os.fstat(fd)
            if not stat.S_ISREG(read.st_mode) or not _holds(fd, read.st_size, needles):
                return False  # no temp file at all: a full disk refuses only the logs to rewrite
            temp = _scrubbed_copy(fd, read, path, needles, mark)
            if temp is None:
                return False
            if not _swapped(temp, path, read):
                continue
            fsync_dir(path.parent)
            _carry_late_bytes(fd, read.st_size, path, needles, mark)
            return True
        finally:
            os.close(fd)
    raise LogKeptChanging(f"it changed while each of {SWAP_ATTEMPTS} scrubbed copies was written; left as it was")


def _signature(info: os.stat_result) -> tuple[int, int, int, int]:
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def _swapped(temp: Path, path: Path, read: os.stat_result) -> bool:
    """Rename the scrubbed copy over the log if the log is still what was read."""
    try:
        faults.checkpoint("purge-raw-scrubbed")
        if _signature(os.lstat(path)) != _signature(read):
            return False
        faults.checkpoint("purge-raw-swap")
        os.replace(temp, path)
        return True
    finally:
        if os.path.lexists(temp):
            os.unlink(temp)


def _holds(fd: int, size: int, needles: list[bytes]) -> bool:
    replacer = _StreamingReplacer(needles, b"", lambda _chunk: None)
    _feed(fd, size, replacer)
    return replacer.replaced


def _feed(fd: int, size: int, replacer: _StreamingReplacer) -> None:
    """The file's first `size` bytes through the replacer (fewer if it shrank meanwhile)."""
    offset = 0
    while offset < size and (chunk := pread(fd, min(_CHUNK, size - offset), offset)):
        replacer.feed(chunk)
        offset += len(chunk)
    replacer.close()


def _scrubbed_copy(fd: int, read: os.stat_result, path: Path, needles: list[bytes], mark: bytes) -> Path | None:
    """The first `read.st_size` bytes of the log, needles replaced, in a durable temp file beside
    it with the log's mode, owner and times; None (and no file) when it holds no needle."""
    out, temp = make_temp(path.parent, f".{path.name}.", TMP_SUFFIX)
    try:
        try:
            replacer = _StreamingReplacer(needles, mark, lambda data: write_all(out, data))
            _feed(fd, read.st_size, replacer)
            if not replacer.replaced:
                os.unlink(temp)
                return None
            _same_metadata(Path(temp), read)
            os.fsync(out)
        finally:
            os.close(out)
    except BaseException:
        if os.path.lexists(temp):
            os.unlink(temp)
        raise
    return Path(temp)


def _same_metadata(temp: Path, read: os.stat_result) -> None:
    """GenericAgent must still be able to append to its log: the same owner and mode, and the
    same mtime, by which both archivers order the logs."""
    if hasattr(os, "chown") and (read.st_uid, read.st_gid) != (os.geteuid(), os.getegid()):
        try:
            os.chown(temp, read.st_uid, read.st_gid)
        except PermissionError:  # not root: the log was this user's to rewrite
            pass
    os.chmod(temp, stat.S_IMODE(read.st_mode))
    os.utime(temp, ns=(read.st_atime_ns, read.st_mtime_ns))


def _carry_late_bytes(fd: int, size: int, path: Path, needles: list[bytes], mark: bytes) -> None:
    """Bytes that reach the old file after the check, by a writer that opened it before the
    rename: appended to the log, scrubbed. Such a writer is watched for a moment (LATE_WATCH);
    one slower still leaves its bytes in the old file's kept copy, which then stays kept."""
    carried = size
    for pause in LATE_WATCH:
        time.sleep(pause)
        grown = os.fstat(fd).st_size
        if grown > carried:
            _append(path, _replace_all(pread(fd, grown - carried, carried), needles, mark))
            carried = grown


def _append(path: Path, data: bytes) -> None:
    out = os.open(path, os.O_WRONLY | os.O_APPEND | NOFOLLOW | NONBLOCK)
    try:
        write_all(out, data)
        os.fsync(out)
    finally:
        os.close(out)


def _sweep_swap_files(layout: Layout, raw_dir: Path) -> None:
    """The temp files of a swap a kill cut off (the log itself is still whole beside each)."""
    folders = [raw_dir] + [kept.path.parent for kept in kept_logs(layout)]
    for folder in dict.fromkeys(folders):
        for entry in _scandir(folder):
            if entry.name.startswith("." + RAW_PREFIX) and entry.name.endswith(TMP_SUFFIX) \
                    and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)


def _scandir(folder: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError:
        return []
