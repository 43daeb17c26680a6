"""Raw session logs (GenericAgent's `model_responses_*.txt`) split into entries, as bytes.

A log is a preamble (normally empty) followed by entries: a marker line
`=== Prompt|Response === YYYY-MM-DD HH:MM:SS[ model=NAME]`, then a body up to the next real
marker. The format (A: JSON/Python-literal bodies, B: text protocol) is decided per entry.
A marker line counts only at the start of the file or after a blank line, and never inside
an open `<tool_result>` of a prompt: an agent that reads another log must not split ours
(the reference archiver's defect 8). Everything stays bytes, so invalid UTF-8 survives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import BinaryIO, Iterator

MARKER_RE = re.compile(rb"=== (Prompt|Response) === (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?: model=([^\r\n]*))?\r?\n?\Z")
TOOL_RESULT_OPEN = b"<tool_result>"
TOOL_RESULT_CLOSE = b"</tool_result>"
USER_SECTION = b"=== USER ===\n"


@dataclass
class RawEntry:
    kind: str  # "Prompt" or "Response"
    timestamp: datetime
    model: str
    marker: bytes  # the marker line as written, newline included
    body: bytes  # everything up to the next real marker (its blank terminator included)

    @property
    def format(self) -> str:
        head = self.body.lstrip()[:2]
        if self.kind == "Prompt":
            return "A" if head[:1] == b"{" else "B"
        return "A" if head == b"[{" else "B"


@dataclass
class Preamble:
    """Bytes before the first marker: a file that is not a log at all ends up here whole."""

    data: bytes


def parse_marker(line: bytes) -> tuple[str, datetime, str] | None:
    if not line.startswith(b"=== "):
        return None
    match = MARKER_RE.match(line)
    if not match:
        return None
    digits = match.group(2)
    try:  # strptime costs more than the rest of the scan; the regex fixed the layout already
        stamp = datetime(int(digits[0:4]), int(digits[5:7]), int(digits[8:10]),
                         int(digits[11:13]), int(digits[14:16]), int(digits[17:19]))
    except ValueError:
        return None
    model = (match.group(3) or b"").decode("utf-8", "replace").strip()
    return match.group(1).decode("ascii"), stamp, model


def copy_out(buffer: bytearray, start: int, end: int) -> bytes:
    """buffer[start:end] as bytes, copied once (a bytearray's slice is a copy, and bytes() another)."""
    with memoryview(buffer) as view:
        return view[start:end].tobytes()


_CANDIDATE = re.compile(rb"\n\r?\n(?==== (?:Prompt|Response) === )")
_MARKER_MAX = 400  # a marker line is never longer; keep this much unscanned until more is read
CHUNK = 4 << 20


def iter_log(stream: BinaryIO, chunk_size: int | None = None) -> Iterator[RawEntry | Preamble]:
    """Yield the preamble (if any) and the entries of a raw log, reading it in large chunks.

    Candidate markers are found with one regex over the buffer (C speed); only candidates are
    looked at in Python, so cost does not grow with the number of lines.
    """
    scanner = _LogScanner()
    while True:
        chunk = stream.read(chunk_size or CHUNK)
        if not chunk:
            break
        yield from scanner.feed(chunk)
    yield from scanner.finish()


class _LogScanner:
    def __init__(self) -> None:
        self.buf = bytearray()
        self.current: RawEntry | None = None
        self.body_start = 0  # where the current entry's body (or the preamble) starts in buf
        self.scan_from = 0
        self.counted_to = 0  # tool_result tags counted in buf[body_start:counted_to]
        self.depth = 0
        self.started = False

    def feed(self, chunk: bytes) -> Iterator[RawEntry | Preamble]:
        self.buf += chunk
        if not self.started:
            if len(self.buf) < _MARKER_MAX:
                return
            self._start()
        yield from self._scan(_MARKER_MAX)

    def finish(self) -> Iterator[RawEntry | Preamble]:
        if not self.started:
            self._start()
        yield from self._scan(0)
        rest = bytes(self.buf[self.body_start:])
        if self.current is not None:
            self.current.body = rest
            yield self.current
        elif rest:
            yield Preamble(rest)

    def _start(self) -> None:
        self.started = True
        line = self._line_at(0)
        parsed = parse_marker(line) if line is not None else None
        if parsed is not None:
            self._open_entry(parsed, line, 0)

    def _line_at(self, start: int) -> bytes | None:
        end = self.buf.find(b"\n", start, start + _MARKER_MAX)
        if end < 0:
            return bytes(self.buf[start:]) if len(self.buf) - start < _MARKER_MAX else None
        return bytes(self.buf[start:end + 1])

    def _open_entry(self, parsed, line: bytes, at: int) -> None:
        kind, stamp, model = parsed
        self.current = RawEntry(kind=kind, timestamp=stamp, model=model, marker=line, body=b"")
        self.body_start = at + len(line)
        self.scan_from = max(0, self.body_start - 1)
        self.counted_to = self.body_start
        self.depth = 0

    def _scan(self, margin: int) -> Iterator[RawEntry | Preamble]:
        """Split off every entry whose end is known; `margin` bytes at the end wait for more data."""
        while True:
            limit = len(self.buf) - margin
            match = _CANDIDATE.search(self.buf, self.scan_from)
            if match is None or match.end() > limit:
                self.scan_from = max(self.scan_from, limit - 3, self.body_start - 1)
                return
            at = match.end()
            line = self._line_at(at)
            parsed = parse_marker(line) if line is not None else None
            if parsed is None or self._inside_tool_result(at):
                self.scan_from = at
                continue
            body = copy_out(self.buf, self.body_start, at)
            if self.current is not None:
                self.current.body = body
                yield self.current
            elif body:
                yield Preamble(body)
            del self.buf[:at]
            self.current = None
            self._open_entry(parsed, line, 0)

    def _inside_tool_result(self, at: int) -> bool:
        """Inside a prompt's open <tool_result>: an agent quoting another log, not a new entry."""
        if self.current is None or self.current.kind != "Prompt":
            return False
        opened = self.buf.count(TOOL_RESULT_OPEN, self.counted_to, at)
        self.depth += opened - self.buf.count(TOOL_RESULT_CLOSE, self.counted_to, at)
        self.counted_to = at
        return self.depth > 0
