"""A session's name as GenericAgent gives it: `MMDD_HHMM-MMDD_HHMM` from its first and last
`=== Prompt ===` timestamp (the Response timestamps only when no Prompt has one).

GenericAgent finds those markers with a line-anchored regex over the whole text, read with
universal newlines, so it also counts a marker quoted inside a tool output and ignores what
follows the timestamp. `NameClock` watches the raw bytes as they are read and applies the
same rule, so a session memctl archives carries the name GenericAgent's own archiver (and
its name-based dedupe) would give it. Parsing of the log for everything else stays
memctl's own (`logs.iter_log`).
"""

from __future__ import annotations

import re
from datetime import datetime

_KINDS = (b"Prompt", b"Response")
_OPENING, _CLOSING = b"=== ", b" ==="
_NEWLINES = b"\n\r"
_STAMP_LENGTH = len(" 2026-04-03 20:13:06")
_CARRY = 64  # longer than a newline, the longest marker and a timestamp


class NameClock:
    """Collects the first and last marker timestamps of each kind from a byte stream."""

    def __init__(self) -> None:
        self.first: dict[bytes, bytes] = {}
        self.last: dict[bytes, bytes] = {}
        self._tail = b"\n"  # the start of the file is the start of a line

    def feed(self, data: bytes) -> None:
        """Note the markers in `data`; those too close to its end wait for the next call."""
        buffer = self._tail + data
        self._note(buffer, len(buffer) - _CARRY)
        self._tail = buffer[-_CARRY:]

    def finish(self) -> None:
        self._note(self._tail, len(self._tail))
        self._tail = b""

    def _note(self, buffer: bytes, before: int) -> None:
        """Each newline + `=== KIND ===` starting before `before`, in order: one pass for `=== `
        (rare outside markers and section lines) instead of one per kind and newline."""
        at = buffer.find(_OPENING, 1)
        while 0 < at <= before:
            if buffer[at - 1] in _NEWLINES:
                kind_at = at + len(_OPENING)
                for kind in _KINDS:
                    if buffer.startswith(kind, kind_at) and buffer.startswith(_CLOSING, kind_at + len(kind)):
                        stamp_at = kind_at + len(kind) + len(_CLOSING)
                        self._note_stamp(kind, buffer[stamp_at: stamp_at + _STAMP_LENGTH])
            at = buffer.find(_OPENING, at + 1)

    def _note_stamp(self, kind: bytes, stamp: bytes) -> None:
        if _is_stamp(stamp):
            self.first.setdefault(kind, stamp[1:])
            self.last[kind] = stamp[1:]

    def base_name(self) -> str | None:
        """GenericAgent's name, or None where GenericAgent would not name it (no timestamp)."""
        kind = b"Prompt" if b"Prompt" in self.first else b"Response"
        if kind not in self.first:
            return None
        first, last = _minute(self.first[kind]), _minute(self.last[kind])
        if first is None:
            return None
        return f"{first}-{last or first}"


_STAMP = re.compile(rb" \d\d\d\d-\d\d-\d\d \d\d:\d\d:\d\d")  # bytes: \d is ASCII 0-9 only


def _is_stamp(text: bytes) -> bool:
    return _STAMP.fullmatch(text) is not None


def _minute(stamp: bytes) -> str | None:
    try:
        moment = datetime(int(stamp[0:4]), int(stamp[5:7]), int(stamp[8:10]),
                          int(stamp[11:13]), int(stamp[14:16]), int(stamp[17:19]))
    except ValueError:
        return None
    return f"{moment:%m%d_%H%M}"


class WatchedReader:
    """A binary reader that shows every chunk it returns to a NameClock."""

    def __init__(self, source, clock: NameClock):
        self.source = source
        self.clock = clock

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(size)
        if data:
            self.clock.feed(data)
        else:
            self.clock.finish()
        return data

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.source.close()
