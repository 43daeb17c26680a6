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

    @property
    def is_text_protocol_prompt(self) -> bool:
        return self.kind == "Prompt" and (self.body.startswith(USER_SECTION) or b"\n" + USER_SECTION in self.body)


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
    try:
        stamp = datetime.strptime(match.group(2).decode("ascii"), "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    model = (match.group(3) or b"").decode("utf-8", "replace").strip()
    return match.group(1).decode("ascii"), stamp, model


def iter_log(stream: BinaryIO) -> Iterator[RawEntry | Preamble]:
    """Yield the preamble (if any) and the entries of a raw log, streaming line by line."""
    preamble: list[bytes] = []
    current: RawEntry | None = None
    body: list[bytes] = []
    previous_blank = True  # the start of the file counts as "after a blank line"
    tool_depth = 0
    for line in stream:
        parsed = parse_marker(line) if previous_blank and tool_depth == 0 else None
        if parsed is not None:
            if current is not None:
                current.body = b"".join(body)
                yield current
            elif preamble:
                yield Preamble(b"".join(preamble))
            kind, stamp, model = parsed
            current = RawEntry(kind=kind, timestamp=stamp, model=model, marker=line, body=b"")
            body = []
            tool_depth = 0
            previous_blank = False
            continue
        if current is None:
            preamble.append(line)
        else:
            body.append(line)
            if current.kind == "Prompt" and b"tool_result>" in line:
                tool_depth = max(0, tool_depth + line.count(TOOL_RESULT_OPEN) - line.count(TOOL_RESULT_CLOSE))
        previous_blank = line in (b"\n", b"\r\n")
    if current is not None:
        current.body = b"".join(body)
        yield current
    elif preamble:
        yield Preamble(b"".join(preamble))
