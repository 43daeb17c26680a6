"""The reversible compressed form of a session (design.md §4).

The compressed text stays readable: every entry keeps its marker line and its body, except
that the empty `=== ASSISTANT ===` echo of text-protocol prompts is dropped and a prompt head
(system prompt, tool list, re-dumped L1) seen verbatim earlier in the session becomes
`⟪memctl:same-as N⟫`. Lines that would be read as markers or directives are escaped with
`⟪memctl:esc⟫`. Every entry is decoded again right after encoding; one that does not come
back byte for byte is stored verbatim (`⟪memctl:verbatim SIZE⟫` + the raw bytes), so the
round trip holds for any input, whatever the heuristics miss.

Layout: a header line, the encoded entries, a trailer with the raw bytes' sha256 and size.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Iterator

from memctl.errors import IntegrityError
from memctl.logs import USER_SECTION, Preamble, RawEntry, iter_log, parse_marker

HEADER = "⟪memctl-session v1⟫\n".encode()
TRAILER_PREFIX = "⟪memctl-end ".encode()
DIRECTIVE = "⟪memctl".encode()
ESCAPE = "⟪memctl:esc⟫".encode()
VERBATIM_RE = re.compile("⟪memctl:verbatim (\\d+)⟫\n".encode() + rb"\Z")
TRAILER_RE = re.compile("⟪memctl-end sha256=([0-9a-f]{64}) bytes=(\\d+)⟫\n?".encode() + rb"\Z")
ECHO = b"=== ASSISTANT ===\n"
_ECHO_AT_END = b"\n" + ECHO + b"\n\n"  # GenericAgent's empty slot, then the entry's blank lines
MIN_SHARED_HEAD = 200

_NEEDS_ESCAPE = re.compile(rb"(?m)^(?==== (?:Prompt|Response) === |" + re.escape(DIRECTIVE) + rb")")
_BODY_DIRECTIVE = re.compile(rb"(?m)^" + re.escape(DIRECTIVE) + "(?::esc⟫|:same-as (\\d+)⟫\n)".encode())


def prompt_head(body: bytes) -> bytes | None:
    """The part of a text-protocol prompt before `=== USER ===` (system prompt, tools, L1)."""
    if body.startswith(USER_SECTION):
        return None
    at = body.find(b"\n" + USER_SECTION)
    if at < 0:
        return None
    head = body[: at + 1]
    return head if len(head) >= MIN_SHARED_HEAD else None


@dataclass
class SharedHeads:
    """Prompt heads seen so far in one session, by the number of the entry that first had them."""

    by_number: dict[int, bytes] = field(default_factory=dict)
    by_content: dict[bytes, int] = field(default_factory=dict)

    def note(self, number: int, entry_kind: str, body: bytes) -> None:
        if entry_kind != "Prompt":
            return
        head = prompt_head(body)
        if head is None:
            return
        key = hashlib.sha1(head).digest()
        if key not in self.by_content:
            self.by_content[key] = number
            self.by_number[number] = head

    def earlier(self, head: bytes) -> int | None:
        return self.by_content.get(hashlib.sha1(head).digest())


def _is_text_prompt(kind: str, body: bytes) -> bool:
    return kind == "Prompt" and (body.startswith(USER_SECTION) or b"\n" + USER_SECTION in body)


def encode_body(kind: str, body: bytes, heads: SharedHeads) -> bytes:
    encoded = _NEEDS_ESCAPE.sub(ESCAPE, body)
    if not _is_text_prompt(kind, body):
        return encoded
    head = prompt_head(body)
    if head is not None:
        first = heads.earlier(head)
        if first is not None:
            escaped_head = _NEEDS_ESCAPE.sub(ESCAPE, head)
            encoded = f"⟪memctl:same-as {first}⟫\n".encode() + encoded[len(escaped_head):]
    if encoded.endswith(_ECHO_AT_END):
        encoded = encoded[: -len(_ECHO_AT_END)] + b"\n\n\n"
    return encoded


def decode_body(kind: str, encoded: bytes, heads: SharedHeads) -> bytes:
    def expand(match: re.Match) -> bytes:
        if match.group(1) is None:
            return b""
        head = heads.by_number.get(int(match.group(1)))
        if head is None:
            raise IntegrityError(f"compressed session refers to entry {match.group(1)}, which it does not hold")
        return head

    body = _BODY_DIRECTIVE.sub(expand, encoded) if DIRECTIVE in encoded else encoded
    if _is_text_prompt(kind, body):
        if body.endswith(b"\n\n\n"):
            body = body[:-2] + ECHO + b"\n\n"
    return body


def _verbatim(data: bytes) -> bytes:
    return f"⟪memctl:verbatim {len(data)}⟫\n".encode() + data + b"\n"


@dataclass
class EncodeStats:
    sha256: str = ""
    bytes_raw: int = 0
    bytes_encoded: int = 0
    entries: int = 0
    verbatim_entries: int = 0


def encode_stream(
    source: BinaryIO,
    write: Callable[[bytes], None],
    on_entry: Callable[[RawEntry], None] | None = None,
) -> EncodeStats:
    """Encode a raw log from `source`, calling `write` with the compressed bytes in order."""
    stats = EncodeStats()
    digest = hashlib.sha256()
    heads = SharedHeads()
    counter = _Counter(write, stats)
    counter(HEADER)
    for number, item in enumerate(iter_log(source)):
        if isinstance(item, Preamble):
            digest.update(item.data)
            stats.bytes_raw += len(item.data)
            counter(_verbatim(item.data))
            continue
        digest.update(item.marker)
        digest.update(item.body)
        stats.bytes_raw += len(item.marker) + len(item.body)
        stats.entries += 1
        encoded = encode_body(item.kind, item.body, heads)
        if decode_body(item.kind, encoded, heads) == item.body:
            counter(item.marker + encoded)
        else:
            stats.verbatim_entries += 1
            counter(_verbatim(item.marker + item.body))
        heads.note(number, item.kind, item.body)
        if on_entry is not None:
            on_entry(item)
    stats.sha256 = digest.hexdigest()
    counter(f"⟪memctl-end sha256={stats.sha256} bytes={stats.bytes_raw}⟫\n".encode())
    return stats


class _Counter:
    def __init__(self, write: Callable[[bytes], None], stats: EncodeStats):
        self.write = write
        self.stats = stats

    def __call__(self, data: bytes) -> None:
        self.stats.bytes_encoded += len(data)
        self.write(data)


def decode_stream(encoded: BinaryIO, write: Callable[[bytes], None]) -> tuple[str, int]:
    """Rebuild the raw log from its compressed form; verifies the trailer's sha256 and size."""
    first = encoded.readline()
    if first != HEADER:
        raise IntegrityError("not a memctl compressed session (missing header line)")
    digest = hashlib.sha256()
    size = 0

    def emit(data: bytes) -> None:
        nonlocal size
        digest.update(data)
        size += len(data)
        write(data)

    trailer = None
    for item in _iter_encoded(encoded):
        if isinstance(item, tuple):
            trailer = item
            break
        emit(item)
    if trailer is None:
        raise IntegrityError("compressed session is truncated (no end line)")
    expected_sha, expected_size = trailer
    if digest.hexdigest() != expected_sha or size != expected_size:
        raise IntegrityError("compressed session does not decode to the recorded sha256")
    return expected_sha, expected_size


def _iter_encoded(encoded: BinaryIO) -> Iterator[bytes | tuple[str, int]]:
    """Yield decoded raw chunks, then the trailer as (sha256, size)."""
    heads = SharedHeads()
    number = 0
    kind: str | None = None
    marker = b""
    body: list[bytes] = []

    def finish() -> bytes:
        nonlocal number
        raw_body = decode_body(kind, b"".join(body), heads)
        heads.note(number, kind, raw_body)
        number += 1
        return marker + raw_body

    while True:
        line = encoded.readline()
        if not line:
            return
        if line.startswith(DIRECTIVE):
            verbatim = VERBATIM_RE.match(line)
            trailer = TRAILER_RE.match(line) if verbatim is None else None
            if verbatim is not None or trailer is not None:
                if kind is not None:
                    yield finish()
                    kind = None
                if trailer is not None:
                    yield (trailer.group(1).decode(), int(trailer.group(2)))
                    return
                data = _read_exact(encoded, int(verbatim.group(1)))
                encoded.read(1)  # the newline that follows the payload
                yield data
                _note_verbatim(heads, number, data)
                number += 1
                continue
        parsed = parse_marker(line) if line.startswith(b"=== ") else None
        if parsed is not None:
            if kind is not None:
                yield finish()
            kind, marker, body = parsed[0], line, []
            continue
        body.append(line)


def _note_verbatim(heads: SharedHeads, number: int, data: bytes) -> None:
    first_line_end = data.find(b"\n") + 1
    parsed = parse_marker(data[:first_line_end]) if first_line_end else None
    if parsed is not None:
        heads.note(number, parsed[0], data[first_line_end:])


def _read_exact(stream: BinaryIO, size: int) -> bytes:
    chunks = []
    remaining = size
    while remaining:
        chunk = stream.read(min(remaining, 1 << 20))
        if not chunk:
            raise IntegrityError("compressed session is truncated inside a verbatim block")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_trailer(data: bytes) -> tuple[str, int] | None:
    """(sha256, size) from the end of a compressed session, without decoding it."""
    tail = data[-200:]
    at = tail.rfind(TRAILER_PREFIX)
    if at < 0:
        return None
    match = TRAILER_RE.match(tail[at:])
    return (match.group(1).decode(), int(match.group(2))) if match else None
