"""History extraction: a session's `[USER]: …` / `[Agent] …` lines, and `all_histories.txt`.

The reference archiver stitched lines together from the `<history>` windows echoed into later
prompts, so it lost the final step (never echoed), cut lines at a literal `\\n` and ignored
sessions without tools (defect 7). Here the lines come from the primary sources instead:
every user request and every step's `<summary>` (the last one included), decoded properly
(JSON for format A prompts, Python literals for format A responses). A session without
summaries is represented by its first request and its final answer. Lines are shortened the
way GenericAgent shortens them, and redacted.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from memctl.l4.logs import USER_SECTION, RawEntry
from memctl.core.redact import redact

SEPARATOR = "=" * 60
ANCHOR = "### [WORKING MEMORY]"
_SUMMARY_RE = re.compile(r"<summary>(.*?)</summary>", re.S)
_HISTORY_RE = re.compile(r"<history>\n?(.*?)</history>", re.S)
_STRIP_TAGS_RE = re.compile(r"<(thinking|summary|tool_use)>.*?</\1>", re.S)
_LITERAL_LIMIT = 2_000_000


def shorten(text: str, head: int, tail: int, limit: int) -> str:
    text = text.strip().replace("\r\n", " ").replace("\n", " ")
    if len(text) >= limit:
        return f"{text[:head]} ... {text[-tail:]}"
    return text


def user_line(request: str) -> str:
    return "[USER]: " + shorten(request, 100, 100, 210)


def agent_line(summary: str) -> str:
    return "[Agent] " + shorten(summary, 40, 40, 90)


@dataclass
class PromptParts:
    request: str = ""  # what the user asked in this prompt ("" for tool-result turns)
    window: list[str] = field(default_factory=list)  # the <history> lines echoed, if any


@dataclass
class ResponseParts:
    summary: str = ""
    answer: str = ""  # prose outside thinking/summary/tool_use


def _split_anchor(text: str) -> tuple[str, list[str]]:
    before, _, after = text.partition(ANCHOR)
    window: list[str] = []
    match = _HISTORY_RE.search(after)
    if match:
        window = [ln for ln in match.group(1).splitlines() if ln.strip()]
    return before.strip(), window


def prompt_parts(entry: RawEntry) -> PromptParts:
    if entry.format == "A":
        request, window = _split_anchor("\n".join(_json_prompt_texts(entry.body)))
        return PromptParts(request=request, window=window)
    return _text_protocol_prompt_parts(entry.body)


def _text_protocol_prompt_parts(body: bytes) -> PromptParts:
    """The user's words come after the tool results in the USER section: look only there."""
    at = body.find(USER_SECTION)
    user = body[at + len(USER_SECTION):] if at >= 0 else body
    last_close = user.rfind(b"</tool_result>")
    if last_close >= 0:
        user = user[last_close + len(b"</tool_result>"):]
    elif b"<tool_result>" in user:
        user = _TOOL_RESULT_BYTES_RE.sub(b"", user)
    text = user.decode("utf-8", "replace").rstrip()
    if text.endswith("=== ASSISTANT ==="):
        text = text[: -len("=== ASSISTANT ===")]
    request, window = _split_anchor(text)
    return PromptParts(request=request, window=window)


_TOOL_RESULT_BYTES_RE = re.compile(rb"<tool_result>.*?(?:</tool_result>|\Z)", re.S)
_TEXT_BLOCK_START = (b'{"type": "text"', b'{"type":"text"')


def block_json(line: bytes) -> bytes:
    """A stripped line of a format A prompt as the one JSON block it holds: the `,` joining it
    to the next, or the `]}` closing the message, cut off."""
    if line.endswith(b"]}"):
        return line[:-2]
    return line[:-1] if line.endswith(b",") else line


def _json_prompt_texts(body: bytes) -> list[str]:
    """Text blocks of a format A prompt: one JSON block a line, so only text lines are parsed
    (tool results, often megabytes, are skipped unread); whole-body JSON as a fallback."""
    texts: list[str] = []
    for raw_line in body.split(b"\n"):
        line = raw_line.strip()
        if not line.startswith(_TEXT_BLOCK_START):
            continue
        try:
            block = json.loads(block_json(line))
        except ValueError:
            return _whole_json_texts(body)
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            texts.append(block["text"])
    return texts


def _whole_json_texts(body: bytes) -> list[str]:
    try:
        message = json.loads(body.decode("utf-8", "replace"))
    except ValueError:
        return []
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)]


def response_parts(entry: RawEntry) -> ResponseParts:
    text = entry.body.decode("utf-8", "replace")
    if entry.format == "A":
        text = "\n".join(_literal_response_texts(text))
    summaries = _SUMMARY_RE.findall(text)
    answer = _STRIP_TAGS_RE.sub("", text).strip()
    return ResponseParts(summary=summaries[-1].strip() if summaries else "", answer=answer)


def _literal_response_texts(text: str) -> list[str]:
    texts: list[str] = []
    for raw_line in text.splitlines():
        if "'type': 'text'" not in raw_line and '"type": "text"' not in raw_line:
            continue
        line = raw_line.strip().lstrip("[").rstrip(",")
        if line.endswith("}]"):
            line = line[:-1]
        value = None
        if len(line) <= _LITERAL_LIMIT:
            try:
                value = ast.literal_eval(line)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                value = None
        if isinstance(value, dict) and isinstance(value.get("text"), str):
            texts.append(value["text"])
        else:
            texts.append(line)
    return texts


@dataclass
class HistoryBuilder:
    """Collects a session's history lines entry by entry (streaming-friendly)."""

    lines: list[str] = field(default_factory=list)
    last_window: list[str] = field(default_factory=list)
    last_answer: str = ""
    summaries: int = 0

    def feed(self, entry: RawEntry) -> None:
        if entry.kind == "Prompt":
            parts = prompt_parts(entry)
            if parts.request:
                self.lines.append(user_line(parts.request))
            if parts.window:
                self.last_window = parts.window
            return
        parts = response_parts(entry)
        if parts.summary:
            self.lines.append(agent_line(parts.summary))
            self.summaries += 1
        if parts.answer:
            self.last_answer = parts.answer

    def result(self, extra_patterns: Sequence[str] = ()) -> list[str]:
        lines = list(self.lines)
        if self.summaries == 0 and self.last_window:
            lines = list(self.last_window)
        if self.summaries == 0 and self.last_answer:
            first_line = next((ln for ln in self.last_answer.splitlines() if ln.strip()), "")
            if first_line and agent_line(first_line) not in lines:
                lines.append(agent_line(first_line))
        return [redact(line, extra_patterns) for line in lines]


def history_block(name: str, lines: Sequence[str]) -> str:
    """One session's block in GenericAgent's all_histories.txt shape."""
    body = "".join(f"{line}\n" for line in lines)
    return f"\n{SEPARATOR}\nSESSION: {name}\n{SEPARATOR}\n{body}"


def iter_history_blocks(path: Path) -> Iterator[tuple[str, list[str]]]:
    """(session name, lines) for each block of an all_histories.txt; tolerant of bad bytes."""
    if not Path(path).exists():
        return
    with open(path, "r", encoding="utf-8", errors="replace") as handle:
        yield from _blocks(handle)


def _blocks(lines: Iterable[str]) -> Iterator[tuple[str, list[str]]]:
    """The blocks whose `SESSION:` line (after a separator) is among `lines`; what comes before
    the first is not a block."""
    name: str | None = None
    block: list[str] = []
    previous = ""
    for raw in lines:
        line = raw.rstrip("\n")
        if line.startswith("SESSION: ") and previous == SEPARATOR:
            if name is not None:
                yield name, _trim_block(block)
            name, block = line[len("SESSION: "):].strip(), []
        elif name is not None:
            block.append(line)
        previous = line
    if name is not None:
        yield name, _trim_block(block)


TAIL_BYTES = 1 << 20  # the first look from the end of all_histories.txt; four times more each time after


def last_history_blocks(path: Path, names: set[str]) -> dict[str, list[str]]:
    """name -> the lines of its last block, for the `names` the history holds: what
    `iter_history_blocks` would give, read from the end of the file. The sessions asked for are
    usually the newest, whose blocks were appended last: a 30 MB history need not be read whole
    for them (it is, when one of the names has no block)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return {}
    span = TAIL_BYTES
    while True:
        start = max(0, size - span)
        with open(path, "rb") as handle:
            handle.seek(start)
            if start:
                handle.readline()  # the line cut at `start`: not a whole line
            text = io.TextIOWrapper(handle, encoding="utf-8", errors="replace")
            found = {name: lines for name, lines in _blocks(text) if name in names}
        if start == 0 or set(found) == names:
            return found
        span *= 4

def _trim_block(lines: list[str]) -> list[str]:
    """Drop the separator that follows SESSION: and the one that opens the next block."""
    if lines and lines[0] == SEPARATOR:
        lines = lines[1:]
    if lines and lines[-1] == SEPARATOR:
        lines = lines[:-1]
    return [ln for ln in lines if ln.strip()]


def sessions_in_history(path: Path) -> set[str]:
    return {name for name, _ in iter_history_blocks(path)}
