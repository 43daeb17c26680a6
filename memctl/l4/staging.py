"""Reading one raw log into a staging file: its encoded (reversible) form, raw-deflated on
both cores, with what the archive needs to know about it (sha256, sizes, entries, times,
history lines, GenericAgent's name). Nothing but the staging file is written.

Deflate is zlib-ng's where the `zlib-ng` package is installed (about 1.8× zlib's speed at
the same level, within 0.5% of its size), the standard library's zlib otherwise; both write
the same standard deflate format, so every zip reader opens the result."""

from __future__ import annotations

import collections
import concurrent.futures
import os
import tempfile
import threading
import zlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Iterable, Iterator

from memctl.core.fsutil import NOFOLLOW
from memctl.l4.codec import encode_stream
from memctl.l4.history import HistoryBuilder
from memctl.l4.logs import RawEntry, copy_out
from memctl.l4.naming import NameClock, WatchedReader


def _fast_zlib():
    try:
        from zlib_ng import zlib_ng
    except ImportError:
        return zlib
    return zlib_ng


ZLIB = _fast_zlib()  # a drop-in zlib: compressobj, decompressobj, crc32
DEFLATE_BACKEND = f"zlib-ng {ZLIB.ZLIBNG_VERSION}" if ZLIB is not zlib else f"zlib {zlib.ZLIB_RUNTIME_VERSION}"


@dataclass
class FileSignature:
    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, info: os.stat_result) -> "FileSignature":
        return cls(info.st_size, info.st_mtime_ns, info.st_ino)


@dataclass
class Candidate:
    path: Path
    signature: FileSignature


class DeflatingSink:
    """Deflates what it is given, in 1 MiB blocks on a thread pool, into a staging file.

    Each block is deflated with the 32 KiB before it as a preset dictionary and ends with a
    sync flush, so the blocks concatenate into one ordinary deflate stream (pigz's method)
    while both cores work; zlib and zlib-ng release the GIL. At most a few blocks are in flight, so
    memory stays flat whatever the size of the log.
    """

    BLOCK = 1 << 20
    WINDOW = 32 << 10
    IN_FLIGHT = 4

    def __init__(self, handle, level: int):
        self.handle = handle
        self.level = level
        self.crc = 0
        self.size = 0
        self.compressed = 0
        self.buffer = bytearray()
        self.window = b""
        self.in_flight: collections.deque[concurrent.futures.Future] = collections.deque()

    def write(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= self.BLOCK:
            block = copy_out(self.buffer, 0, self.BLOCK)
            del self.buffer[: self.BLOCK]
            self._submit(block, final=False)

    def _submit(self, block: bytes, final: bool) -> None:
        self.crc = ZLIB.crc32(block, self.crc)
        self.size += len(block)
        self.in_flight.append(worker_pool().submit(_deflate_block, block, self.window, self.level, final))
        self.window = block[-self.WINDOW:] if len(block) >= self.WINDOW else (self.window + block)[-self.WINDOW:]
        while len(self.in_flight) > self.IN_FLIGHT:
            self._write_out(self.in_flight.popleft().result())

    def _write_out(self, data: bytes) -> None:
        self.compressed += len(data)
        self.handle.write(data)

    def close(self) -> None:
        self._submit(bytes(self.buffer), final=True)
        self.buffer.clear()
        while self.in_flight:
            self._write_out(self.in_flight.popleft().result())


def _deflate_block(block: bytes, window: bytes, level: int, final: bool) -> bytes:
    block_compressor = _reusable_compressor(level)
    if block_compressor is not None:
        # One call outside the GIL: a thread that came back for it after each of compress and
        # flush waited up to a switch interval (5 ms) for the encoding thread to let go of it.
        deflated, _ = block_compressor.compress_and_crc(block, window)
        return deflated + EMPTY_FINAL_BLOCK if final else deflated
    if window:
        compressor = ZLIB.compressobj(level, ZLIB.DEFLATED, -15, zdict=window)
    else:
        compressor = ZLIB.compressobj(level, ZLIB.DEFLATED, -15)
    return compressor.compress(block) + compressor.flush(ZLIB.Z_FINISH if final else ZLIB.Z_SYNC_FLUSH)


EMPTY_FINAL_BLOCK = b"\x03\x00"  # a final fixed-Huffman block holding only its end code
_THREAD_STATE = threading.local()


def _reusable_compressor(level: int):
    """This thread's zlib-ng `_ParallelCompress` for `level` (what zlib-ng's own threaded gzip
    uses: reset, preset dictionary, deflate with a sync flush, all in one call without the GIL),
    or None where zlib-ng is not installed or has no such class."""
    factory = getattr(ZLIB, "_ParallelCompress", None)
    if factory is None:
        return None
    by_level = _THREAD_STATE.__dict__.setdefault("compressors", {})
    if level not in by_level:
        block = DeflatingSink.BLOCK
        by_level[level] = factory(buffersize=block + block // 8 + 512, level=level)
    return by_level[level]


_POOL: concurrent.futures.ThreadPoolExecutor | None = None


def worker_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2))
    return _POOL


class PlainSink:
    """The same interface as DeflatingSink, writing the encoded text as it is."""

    def __init__(self, handle):
        self.handle = handle
        self.crc = 0
        self.compressed = 0

    def write(self, data: bytes) -> None:
        self.crc = ZLIB.crc32(data, self.crc)
        self.compressed += len(data)
        self.handle.write(data)

    def close(self) -> None:
        return None


@dataclass
class Staged:
    candidate: Candidate
    staging: Path  # the encoded session, already raw-deflated
    crc: int
    deflated_size: int
    sha256: str
    bytes_raw: int
    bytes_compressed: int
    entries: int
    start: datetime
    end: datetime
    format: str
    history: list[str]
    base_name: str = ""  # GenericAgent's name for it (naming.py); a clash adds a suffix
    name: str = ""
    continues: str = ""

    @property
    def month(self) -> str:
        return f"{self.start:%Y-%m}"


def stage(
    candidate: Candidate, folder: Path, extra_patterns: Iterable[str] = (), level: int | None = 6, durable: bool = True
) -> Staged:
    """Encode one raw log into a hidden staging file in `folder` (raw-deflated at `level`, or
    plain text when level is None); nothing else is touched. `durable`: fsynced, for a caller
    that renames the file into place; the archive copies it into a zip it fsyncs instead."""
    fd, staging_name = tempfile.mkstemp(dir=folder, prefix=".staging-", suffix=".tmp")
    staging = Path(staging_name)
    builder = HistoryBuilder()
    stamps: list[datetime] = []
    formats: set[str] = set()

    def on_entry(entry: RawEntry) -> None:
        if not stamps:
            stamps.append(entry.timestamp)
        stamps[1:] = [entry.timestamp]
        formats.add(entry.format)
        builder.feed(entry)

    name_clock = NameClock()
    try:
        with os.fdopen(fd, "wb") as out, WatchedReader(_open_raw(candidate.path), name_clock) as source:
            sink = DeflatingSink(out, level) if level is not None else PlainSink(out)
            try:
                stats = encode_stream(source, sink.write, on_entry)
            finally:
                sink.close()
            out.flush()
            if durable:
                os.fsync(out.fileno())
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    name_clock.finish()
    fallback = datetime.fromtimestamp(candidate.signature.mtime_ns / 1e9).replace(microsecond=0)
    start = stamps[0] if stamps else fallback
    end = stamps[-1] if stamps else fallback
    return Staged(
        candidate=candidate,
        staging=staging,
        crc=sink.crc,
        deflated_size=sink.compressed,
        sha256=stats.sha256,
        bytes_raw=stats.bytes_raw,
        bytes_compressed=stats.bytes_encoded,
        entries=stats.entries,
        start=start,
        end=end,
        format="+".join(sorted(formats)) or "unparsed",
        history=builder.result(tuple(extra_patterns)),
        base_name=name_clock.base_name() or session_base_name(start, end),
    )


STAGERS = 2


def stage_ahead(
    candidates: list[Candidate], folder: Path, extra_patterns: Iterable[str] = (), level: int | None = 6
) -> Iterator[tuple[Candidate, concurrent.futures.Future]]:
    """(candidate, future of its Staged) in the candidates' order, two logs staged at a time,
    the largest first: alone, a log's encoding (Python, one core) and its last blocks' deflate
    would take turns, and the log staged last runs alone, so that log should be a small one.
    Leaving early cancels the logs not started, waits for the two in progress and removes
    the staging files nobody took."""
    patterns = tuple(extra_patterns)
    stagers = concurrent.futures.ThreadPoolExecutor(STAGERS, thread_name_prefix="memctl-stage")
    futures: dict[int, concurrent.futures.Future] = {}
    for number in sorted(range(len(candidates)), key=lambda n: -candidates[n].signature.size):
        futures[number] = stagers.submit(stage, candidates[number], folder, patterns, level, durable=False)
    taken = 0
    try:
        for taken, candidate in enumerate(candidates, start=1):
            yield candidate, futures[taken - 1]
    finally:
        stagers.shutdown(wait=True, cancel_futures=True)
        for number in range(taken, len(candidates)):
            _discard_staged(futures[number])


def _discard_staged(future: concurrent.futures.Future) -> None:
    if future.cancelled() or future.exception() is not None:
        return
    future.result().staging.unlink(missing_ok=True)


def _open_raw(path: Path):
    fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    return os.fdopen(fd, "rb", buffering=1 << 20)


def session_base_name(start: datetime, end: datetime) -> str:
    """`MMDD_HHMM-MMDD_HHMM` from the first and last entry, for a log GenericAgent could not
    name (no timestamped marker); uniqueness comes from a suffix, identity from sha256."""
    return f"{start:%m%d_%H%M}-{end:%m%d_%H%M}"


def unique_name(base: str, taken: set[str]) -> str:
    if base not in taken:
        return base
    number = 2
    while f"{base}_{number}" in taken:
        number += 1
    return f"{base}_{number}"


