"""Scratch space on disk for a dream (issue #31, a dream of a million entries in bounded
memory): what the consolidation's blocking keeps of every text — its key, its token numbers —
and what a step appends to L6 and the dream log, written to temporary files (removed when
closed, never under the memory root) and read back by index, in order or in chunks of whole
lines, so that neither the planner's memory nor a step's grows with them.
"""

from __future__ import annotations

import os
import tempfile
from array import array

from memctl.core.fsutil import pread


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterator

CHUNK_NUMBERS = 1 << 18  # numbers written or read at a time
CHUNK_BYTES = 8 << 20  # bytes of lines held before they are written, or read back at a time


def _write(fd: int, data: bytes) -> None:
    """The whole buffer. Not `fsutil.write_all`: scratch is not the memory's data, so it is
    neither fsynced nor one of the writes fault injection counts."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class ScratchKeys:
    """Every text's key (its normalized words, sorted) in a temporary file, read by index."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="memctl-dream-keys-", buffering=0)
        self._offsets = array("q")
        self._lengths = array("i")  # in characters, for the length sort
        self._sizes = array("i")  # in bytes
        self._pending: list[bytes] = []

    def __enter__(self) -> "ScratchKeys":
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()

    def append(self, key: str) -> None:
        data = key.encode("utf-8", "surrogatepass")
        self._offsets.append(self._end())
        self._lengths.append(len(key))
        self._sizes.append(len(data))
        self._pending.append(data)
        if len(self._pending) >= 4096:
            self._flush()

    def _end(self) -> int:
        return self._offsets[-1] + self._sizes[-1] if self._offsets else 0

    def _flush(self) -> None:
        if self._pending:
            os.lseek(self._file.fileno(), 0, os.SEEK_END)
            _write(self._file.fileno(), b"".join(self._pending))
            self._pending = []

    def __len__(self) -> int:
        return len(self._offsets)

    def length(self, index: int) -> int:
        return self._lengths[index]

    def __getitem__(self, index: int) -> str:
        self._flush()
        data = pread(self._file.fileno(), self._sizes[index], self._offsets[index])
        return data.decode("utf-8", "surrogatepass")


class ScratchNumbers:
    """Arrays of numbers written one after the other to a temporary file, read back in order."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="memctl-dream-tokens-", buffering=0)
        self._sizes = array("i")
        self._pending = array("i")

    def append(self, numbers: array) -> None:
        self._sizes.append(len(numbers))
        self._pending.extend(numbers)
        if len(self._pending) >= CHUNK_NUMBERS:
            self._flush()

    def _flush(self) -> None:
        _write(self._file.fileno(), self._pending.tobytes())
        self._pending = array("i")

    def read(self) -> Iterator[array]:
        self._flush()
        os.lseek(self._file.fileno(), 0, os.SEEK_SET)
        block, at = array("i"), 0
        for size in self._sizes:
            if at + size > len(block):
                block, at = block[at:], 0
                want = max(CHUNK_NUMBERS, size - len(block))
                block.frombytes(_read_exactly(self._file.fileno(), want * block.itemsize))
            yield block[at:at + size]
            at += size

    def close(self) -> None:
        self._file.close()


def _read_exactly(fd: int, size: int) -> bytes:
    """Up to `size` bytes (fewer only at the end of the file), a whole number of 4-byte items."""
    data = b""
    while len(data) < size:
        more = os.read(fd, size - len(data))
        if not more:
            break
        data += more
    return data[:len(data) - len(data) % 4]


class ScratchLines:
    """Whole lines written to a temporary file as they are made, read back in chunks of whole
    lines: what a dream step appends to L6 and the dream log under the lock, made before it
    without holding them (tens of MB a step at a million entries)."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="memctl-dream-step-", buffering=0)
        self._pending: list[bytes] = []
        self._held = 0
        self.size = 0  # bytes written so far

    def __enter__(self) -> "ScratchLines":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def write(self, data: bytes) -> None:
        self._pending.append(data)
        self._held += len(data)
        self.size += len(data)
        if self._held >= CHUNK_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            os.lseek(self._file.fileno(), 0, os.SEEK_END)
            _write(self._file.fileno(), b"".join(self._pending))
            self._pending, self._held = [], 0

    def chunks(self) -> Iterator[bytes | memoryview]:
        """What was written, in pieces of about CHUNK_BYTES each ending with a whole line (held
        lines only: nothing written to the file yet is one piece). The pieces are read into
        one buffer, copied nowhere else (a step appends them under the lock): each is good
        until the next is asked for."""
        if self.size == self._held:
            if self._pending:
                yield b"".join(self._pending)
            return
        self._flush()
        buffer = bytearray(CHUNK_BYTES)
        at, filled = 0, 0  # bytes of the file read; bytes of the buffer in use
        self._file.seek(0)
        while at < self.size:
            view = memoryview(buffer)
            got = self._file.readinto(view[filled:filled + min(len(buffer) - filled, self.size - at)])
            if not got:
                raise OSError("a dream step's scratch file ended early")
            at, filled = at + got, filled + got
            end = filled if at >= self.size else buffer.rfind(b"\n", 0, filled) + 1
            if end == 0:  # a line longer than the buffer: a larger one (a new object: the
                grown = bytearray(2 * len(buffer))  # last piece handed out may still be held)
                grown[:filled] = view[:filled]
                buffer = grown
                continue
            yield view[:end]
            buffer[:filled - end] = buffer[end:filled]  # the same length: no resize
            filled -= end

    def close(self) -> None:
        self._file.close()
