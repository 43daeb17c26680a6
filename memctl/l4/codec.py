"""The reversible compressed form of a session (design.md §4).

The compressed text stays readable: every entry keeps its marker line and its body, except
that the empty `=== ASSISTANT ===` echo of text-protocol prompts is dropped, a prompt head
(system prompt, tool list, re-dumped L1) seen verbatim earlier in the session becomes
`⟪memctl:same-as N⟫`, and the lines a `<history>` window repeats from the previous window
become `⟪memctl:window K⟫`. Lines that would be read as markers or directives are escaped with
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

from memctl.core.errors import IntegrityError
from memctl.l4.logs import CHUNK, USER_SECTION, Preamble, RawEntry, copy_out, iter_log, parse_marker

HEADER_V1 = "⟪memctl-session v1⟫\n".encode()  # window tokens glued to the next line
HEADER = "⟪memctl-session v2⟫\n".encode()  # window tokens on a line of their own
TRAILER_PREFIX = "⟪memctl-end ".encode()
DIRECTIVE = "⟪memctl".encode()
ESCAPE = "⟪memctl:esc⟫".encode()
VERBATIM_RE = re.compile("⟪memctl:verbatim (\\d+)⟫\n".encode() + rb"\Z")
TRAILER_RE = re.compile("⟪memctl-end sha256=([0-9a-f]{64}) bytes=(\\d+)⟫\n?".encode() + rb"\Z")
ECHO = b"=== ASSISTANT ===\n"
_ECHO_AT_END = b"\n" + ECHO + b"\n\n"  # GenericAgent's empty slot, then the entry's blank lines
MIN_SHARED_HEAD = 200

_BODY_DIRECTIVE = re.compile(re.escape(DIRECTIVE) + "(?::esc⟫|:same-as (\\d+)⟫\n)".encode())


def is_session_header(data: bytes) -> bool:
    """Whether `data` starts with the header line of a memctl compressed session (any version)."""
    return data[: len(HEADER)] in (HEADER, HEADER_V1)


def prompt_head(body: bytes) -> bytes | None:
    """The part of a text-protocol prompt before `=== USER ===` (system prompt, tools, L1)."""
    if body.startswith(USER_SECTION):
        return None
    at = body.find(b"\n" + USER_SECTION)
    if at < 0:
        return None
    head = body[: at + 1]
    return head if len(head) >= MIN_SHARED_HEAD else None


_WINDOW_OPEN = b"<history>"
_WINDOW_CLOSE = b"</history>"
_WINDOW_TOKEN = re.compile("⟪memctl:window (\\d+)⟫".encode())
MIN_SHARED_WINDOW_LINES = 3


def history_window(body: bytes) -> tuple[int, int, bytes, list[bytes]] | None:
    """The working-memory `<history>` window of a prompt: (start, end, separator, lines).

    start..end spans the lines (each followed by the separator, `\\n` or a JSON-escaped
    `\\\\n` in format A). The window slides by a line or two per turn, so most of its lines
    repeat the previous window's; deflate cannot see that once large tool output sits between.
    """
    at = body.find(_WINDOW_OPEN)
    if at < 0:
        return None
    start = at + len(_WINDOW_OPEN)
    separator = b"\\n" if body.startswith(b"\\n", start) else b"\n"
    if not body.startswith(separator, start):
        return None
    start += len(separator)
    end = body.find(_WINDOW_CLOSE, start)
    if end < 0 or not body.startswith(separator, end - len(separator)) or end - len(separator) < start:
        return None
    return start, end, separator, body[start:end - len(separator)].split(separator)


@dataclass
class SharedHeads:
    """What one session has shown so far that later entries repeat: prompt heads (by the
    number of the entry that first had them) and the last `<history>` window."""

    by_number: dict[int, bytes] = field(default_factory=dict)
    by_content: dict[bytes, int] = field(default_factory=dict)
    window: tuple[bytes, list[bytes]] | None = None
    token_lines: bool = True  # False for a v1 session, whose window token is glued to the next line

    def note(self, number: int, entry_kind: str, body: bytes) -> None:
        if entry_kind != "Prompt":
            return
        found = history_window(body)
        if found is not None:
            self.window = (found[2], found[3])
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


_ESCAPED_STARTS = (b"=== Prompt === ", b"=== Response === ", DIRECTIVE)


def _line_starts_with(body: bytes, prefixes: tuple[bytes, ...]) -> list[int]:
    """Offsets of the lines of `body` that start with one of `prefixes`, in order.

    bytes.find over each prefix is C speed; a `(?m)^` regex tests every byte position."""
    found: list[int] = []
    for prefix in prefixes:
        if body.startswith(prefix):
            found.append(0)
        needle = b"\n" + prefix
        at = body.find(needle)
        while at >= 0:
            found.append(at + 1)
            at = body.find(needle, at + 1)
    return sorted(found)


def _escape(body: bytes) -> bytes:
    starts = _line_starts_with(body, _ESCAPED_STARTS)
    if not starts:
        return body
    pieces, previous = [], 0
    for at in starts:
        pieces += [body[previous:at], ESCAPE]
        previous = at
    pieces.append(body[previous:])
    return b"".join(pieces)


def encode_body(kind: str, body: bytes, heads: SharedHeads) -> bytes:
    encoded = _escape(body)
    if not _is_text_prompt(kind, body):
        return _shorten_window(kind, encoded, heads)
    head = prompt_head(body)
    if head is not None:
        first = heads.earlier(head)
        if first is not None:
            escaped_head = _escape(head)
            encoded = f"⟪memctl:same-as {first}⟫\n".encode() + encoded[len(escaped_head):]
    encoded = _shorten_window(kind, encoded, heads)
    if encoded.endswith(_ECHO_AT_END):
        encoded = encoded[: -len(_ECHO_AT_END)] + b"\n\n\n"
    return encoded


def _shorten_window(kind: str, encoded: bytes, heads: SharedHeads) -> bytes:
    """Replace the lines this window shares with the previous one by `⟪memctl:window K⟫`
    (the previous window's lines from K on)."""
    if kind != "Prompt" or heads.window is None or _WINDOW_OPEN not in encoded:
        return encoded
    found = history_window(encoded)
    previous_separator, previous = heads.window
    if found is None or found[2] != previous_separator:
        return encoded
    start, end, separator, lines = found
    for first in range(len(previous)):
        shared = len(previous) - first
        if shared < MIN_SHARED_WINDOW_LINES:
            break
        if lines[:shared] == previous[first:]:
            # The token gets a line of its own, so GenericAgent's readers (which keep the lines
            # that start with [USER] / [Agent]) still see every new line of the window.
            rest = b"".join(line + separator for line in lines[shared:])
            return encoded[:start] + f"⟪memctl:window {first}⟫".encode() + separator + rest + encoded[end:]
    return encoded


def _expand_window(encoded: bytes, heads: SharedHeads) -> bytes:
    match = _WINDOW_TOKEN.search(encoded)
    if match is None:
        return encoded
    if heads.window is None:
        raise IntegrityError("compressed session refers to a history window it does not hold")
    separator, previous = heads.window
    lines = previous[int(match.group(1)):]
    after = match.end()
    if heads.token_lines and encoded.startswith(separator, after):
        after += len(separator)
    return encoded[: match.start()] + b"".join(line + separator for line in lines) + encoded[after:]


def decode_body(kind: str, encoded: bytes, heads: SharedHeads) -> bytes:
    def expand(match: re.Match) -> bytes:
        if match.group(1) is None:
            return b""
        head = heads.by_number.get(int(match.group(1)))
        if head is None:
            raise IntegrityError(f"compressed session refers to entry {match.group(1)}, which it does not hold")
        return head

    if DIRECTIVE in encoded:
        body = _expand_directives(_expand_window(encoded, heads) if kind == "Prompt" else encoded, expand)
    else:
        body = encoded
    if _is_text_prompt(kind, body):
        if body.endswith(b"\n\n\n"):
            body = body[:-2] + ECHO + b"\n\n"
    return body


def _expand_directives(encoded: bytes, expand: Callable[[re.Match], bytes]) -> bytes:
    """Undo escapes and same-as references: only lines that start with a directive are looked at."""
    pieces, previous = [], 0
    for at in _line_starts_with(encoded, (DIRECTIVE,)):
        match = _BODY_DIRECTIVE.match(encoded, at)
        if match is None:
            continue
        pieces += [encoded[previous:at], expand(match)]
        previous = match.end()
    if not pieces:
        return encoded
    pieces.append(encoded[previous:])
    return b"".join(pieces)


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
            counter(item.marker)
            counter(encoded)
        else:
            stats.verbatim_entries += 1
            counter(_verbatim(item.marker + item.body))
        heads.note(number, item.kind, item.body)
        if on_entry is not None:
            on_entry(item)
    stats.sha256 = digest.hexdigest()
    counter(f"\n⟪memctl-end sha256={stats.sha256} bytes={stats.bytes_raw}⟫\n".encode())
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
    first = encoded.read(len(HEADER))
    if not is_session_header(first):
        raise IntegrityError("not a memctl compressed session (missing header line)")
    digest = hashlib.sha256()
    size = 0
    decoder = _Decoder()
    decoder.heads.token_lines = first != HEADER_V1
    trailer = None
    while trailer is None:
        chunk = encoded.read(CHUNK)
        pieces = decoder.feed(chunk) if chunk else decoder.finish()
        for piece in pieces:
            if isinstance(piece, tuple):
                trailer = piece
                break
            digest.update(piece)
            size += len(piece)
            write(piece)
        if not chunk:
            break
    if trailer is None:
        raise IntegrityError("compressed session is truncated (no end line)")
    if digest.hexdigest() != trailer[0] or size != trailer[1]:
        raise IntegrityError("compressed session does not decode to the recorded sha256")
    return trailer


_SPECIAL_LINE = re.compile(
    rb"\n(?==== (?:Prompt|Response) === |" + re.escape("⟪memctl-end ".encode()) + b"|"
    + re.escape("⟪memctl:verbatim ".encode()) + rb")"
)


class _Decoder:
    """Splits the compressed stream at real markers, verbatim blocks and the trailer."""

    def __init__(self) -> None:
        self.buf = bytearray(b"\n")  # a virtual newline: the header ended one
        self.heads = SharedHeads()
        self.number = 0
        self.kind: str | None = None
        self.marker = b""
        self.body_start = 1
        self.scan_from = 0
        self.done = False

    def feed(self, chunk: bytes) -> Iterator[bytes | tuple[str, int]]:
        self.buf += chunk
        return self._scan(200, eof=False)

    def finish(self) -> Iterator[bytes | tuple[str, int]]:
        return self._scan(0, eof=True)

    def _scan(self, margin: int, eof: bool) -> Iterator[bytes | tuple[str, int]]:
        while not self.done:
            limit = len(self.buf) - margin
            match = _SPECIAL_LINE.search(self.buf, self.scan_from)
            if match is None or match.end() > limit:
                self.scan_from = max(self.scan_from, limit - 1, self.body_start - 1)
                return
            at = match.end()
            line_end = self.buf.find(b"\n", at)
            if line_end < 0 and not eof:
                return
            line = bytes(self.buf[at: line_end + 1 if line_end >= 0 else len(self.buf)])
            if line.startswith(b"=== "):
                parsed = parse_marker(line)
                if parsed is None:
                    self.scan_from = at
                    continue
                yield from self._close_entry(at)
                self.kind, self.marker = parsed[0], line
                self._drop(at + len(line))
                continue
            trailer = TRAILER_RE.match(line)
            if trailer is not None:
                yield from self._close_entry(at - 1)  # the newline written before the trailer
                self.done = True
                yield (trailer.group(1).decode(), int(trailer.group(2)))
                return
            verbatim = VERBATIM_RE.match(line)
            if verbatim is None:
                self.scan_from = at
                continue
            size = int(verbatim.group(1))
            payload_start = at + len(line)
            if len(self.buf) < payload_start + size + 1:
                if eof:
                    raise IntegrityError("compressed session is truncated inside a verbatim block")
                return
            yield from self._close_entry(at)
            data = copy_out(self.buf, payload_start, payload_start + size)
            _note_verbatim(self.heads, self.number, data)
            self.number += 1
            yield data
            self._drop(payload_start + size + 1)

    def _close_entry(self, end: int) -> Iterator[bytes]:
        if self.kind is None:
            return
        raw_body = decode_body(self.kind, copy_out(self.buf, self.body_start, end), self.heads)
        self.heads.note(self.number, self.kind, raw_body)
        self.number += 1
        self.kind = None
        yield self.marker + raw_body

    def _drop(self, upto: int) -> None:
        """Forget everything before `upto`, keeping one newline so line starts stay findable."""
        del self.buf[: upto - 1]
        self.body_start = 1
        self.scan_from = 0


def _note_verbatim(heads: SharedHeads, number: int, data: bytes) -> None:
    first_line_end = data.find(b"\n") + 1
    parsed = parse_marker(data[:first_line_end]) if first_line_end else None
    if parsed is not None:
        heads.note(number, parsed[0], data[first_line_end:])


def read_trailer(data: bytes) -> tuple[str, int] | None:
    """(sha256, size) from the end of a compressed session, without decoding it."""
    tail = data[-200:]
    at = tail.rfind(TRAILER_PREFIX)
    if at < 0:
        return None
    match = TRAILER_RE.match(tail[at:])
    return (match.group(1).decode(), int(match.group(2))) if match else None
