"""Tool calls read back from a session's raw log (`memctl learn` folds them into the collector).

A Response asks for tools, the next Prompt carries their results. Format A (native): the
Response's `tool_use` blocks (Python literals, one a line, with `id`, `name`, `input`) and the
Prompt's `tool_result` blocks (JSON, one a line) matched by id. Format B (text protocol):
`<tool_use>{"name": …, "arguments": …}</tool_use>` in the Response and `<tool_result>` blocks in
the next USER section, matched in order. Each call becomes a `learn.tools.ToolEvent` whose
`call` is the agent's id (so the plugin's report of the same call is a duplicate) or, without
one, the session's name and the call's ordinal.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Callable, Iterable

from memctl.l4.history import block_json
from memctl.l4.logs import USER_SECTION, RawEntry
from memctl.learn.tools import ToolEvent, failure_of, make_event

_LINE_LIMIT = 1 << 20  # a block line longer than this is not parsed (a tool's megabytes of output)
_TOOL_USE_B = re.compile(r"<tool_use>\s*(\{.*?\})\s*</tool_use>", re.S)
_TOOL_RESULT_B = re.compile(rb"<tool_result>(.*?)(?:</tool_result>|\Z)", re.S)
_RESULT_A_START = (b'{"type": "tool_result"', b'{"type":"tool_result"')


class _Call:
    __slots__ = ("id", "name", "args")

    def __init__(self, id: str, name: str, args: Any) -> None:
        self.id, self.name, self.args = id, name, args


def tool_events(entries: Iterable[RawEntry], session: str, scrub: Callable[[str], str]) -> list[ToolEvent]:
    """Every tool call of a session with its outcome (a call whose result was never logged is left out)."""
    events: list[ToolEvent] = []
    asked: list[_Call] = []
    ordinal = 0
    for entry in entries:
        if entry.kind == "Response":
            asked = _calls_asked(entry)
            continue
        if not asked:
            continue
        results = _results_given(entry)
        for position, call in enumerate(asked):
            result = results.get(call.id) if call.id else results.get(position)
            if result is None and call.id:
                result = results.get(position)
            if result is None:
                continue
            ordinal += 1
            events.append(make_event(call.name, call.args, failure_of(result), scrub, session,
                                     call.id or f"{session}#{ordinal}", entry.timestamp.isoformat(), "log"))
        asked = []
    return events


def _calls_asked(entry: RawEntry) -> list[_Call]:
    text = entry.body.decode("utf-8", "replace")
    if entry.format == "A":
        return [call for line in text.splitlines() if "'tool_use'" in line and (call := _literal_call(line))]
    calls = []
    for match in _TOOL_USE_B.finditer(text):
        try:
            data = json.loads(match.group(1))
        except (ValueError, RecursionError):
            continue
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            calls.append(_Call("", data["name"], data.get("arguments", {})))
    return calls


def _literal_call(line: str) -> _Call | None:
    line = line.strip().lstrip("[").rstrip(",")
    if line.endswith("}]"):
        line = line[:-1]
    if len(line) > _LINE_LIMIT:
        return None
    try:
        block = ast.literal_eval(line)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(block, dict) or block.get("type") != "tool_use" or not isinstance(block.get("name"), str):
        return None
    return _Call(str(block.get("id") or ""), block["name"], block.get("input", {}))


def _results_given(entry: RawEntry) -> dict[Any, Any]:
    """A Prompt's tool results, by the id they answer and by their position."""
    results: dict[Any, Any] = {}
    if entry.format == "A":
        blocks = [b for line in entry.body.split(b"\n") if (b := _json_result(line)) is not None]
        for position, block in enumerate(blocks):
            results[position] = block.get("content")
            if block.get("tool_use_id"):
                results[str(block["tool_use_id"])] = block.get("content")
        return results
    at = entry.body.find(USER_SECTION)
    section = entry.body[at + len(USER_SECTION):] if at >= 0 else entry.body
    for position, match in enumerate(_TOOL_RESULT_B.finditer(section)):
        results[position] = match.group(1).decode("utf-8", "replace").strip()
    return results


def _json_result(raw_line: bytes) -> dict | None:
    line = raw_line.strip()
    if not line.startswith(_RESULT_A_START) or len(line) > _LINE_LIMIT:
        return None
    try:
        block = json.loads(block_json(line))
    except (ValueError, RecursionError):
        return None
    return block if isinstance(block, dict) else None
