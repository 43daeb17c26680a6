"""The tool-usage collector's event (design.md §9a): one tool call, whether it failed, and the
shape of its error.

Events come from GenericAgent's `tool_after` hook (the plugin runs `memctl tools record`) and
from archived raw logs (`memctl learn`, `learn.log_tools`). This module owns what an event is
and how it is read from an untrusted request: a result is classified as a failure the same way
whichever way it came; an error is folded into its shape (URLs, paths, quoted values, ids and
numbers replaced) so the same failure on another file counts as the same failure; the failed
arguments are kept redacted and short. `learn.tools_store` keeps the events.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

ARGS_CHARS = 240  # the failed arguments kept with an event
ERROR_CHARS = 400  # the error text kept with an event
SHAPE_CHARS = 160
TOOL_NAME_CHARS = 100
FIELD_CHARS = 200  # session, call id, time
_TOOL_NAME = re.compile(r"[^\x00-\x1f\x7f`]{1,100}")
_FAIL_STATUSES = {"error", "fail", "failed", "failure", "exception"}
_FAIL_START = re.compile(r"\s*(?:error|errno|错误|失败|failed|failure|exception|traceback)\b", re.I)
_TRACEBACK = "Traceback (most recent call last)"
_SHAPE_RULES = (
    (re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>)]+"), "<url>"),
    (re.compile(r"(?<![\w])[A-Za-z]:\\[^\s'\"]*"), "<path>"),
    (re.compile(r"(?<![\w.])(?:~|\.{1,2})?(?:/[^\s/'\":,)]+){1,}/?"), "<path>"),
    (re.compile(r"'[^'\n]{1,200}'|\"[^\"\n]{1,200}\""), "'<s>'"),
    (re.compile(r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9][\w-]{5,}\b"), "<id>"),
    (re.compile(r"\d+(?:[.,]\d+)*"), "<n>"),
)


class ToolEvent:
    """One tool call. `error` is "" when it succeeded; `call` is the agent's id of the call (a
    logged session's name and ordinal when it had none), which makes a repeated event a
    duplicate; `source`: "plugin", "log" or what a caller says."""

    __slots__ = ("tool", "ok", "error", "shape", "args", "session", "call", "time", "source")

    def __init__(self, tool: str, ok: bool, error: str = "", shape: str = "", args: str = "", session: str = "",
                 call: str = "", time: str = "", source: str = "") -> None:
        self.tool, self.ok, self.error, self.shape, self.args = tool, ok, error, shape, args
        self.session, self.call, self.time, self.source = session, call, time, source

    def key(self) -> str | None:
        """What makes a second report of the same call a duplicate (None: nothing does)."""
        return f"{self.tool}\x1f{self.call}" if self.call else None

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in ToolEvent.__slots__}
        return {key: value for key, value in data.items() if value != "" or key in ("tool", "ok")}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ToolEvent":
        return cls(str(data["tool"]), bool(data.get("ok", True)), *(str(data.get(name, "")) for name in
                                                                     ToolEvent.__slots__[2:]))

    def __repr__(self) -> str:
        return f"ToolEvent({self.tool!r}, ok={self.ok}, {self.shape!r})"


def failure_of(result: Any) -> str | None:
    """The error text when a tool's result says it failed, else None. GenericAgent's tools
    answer with a dict (`status`, `exit_code`, `stderr`, `msg`) or text; JSON text is read as
    the dict it holds."""
    if isinstance(result, str):
        stripped = result.strip()
        if stripped.startswith("{") and len(stripped) <= 1 << 20:
            try:
                parsed = json.loads(stripped)
            except (ValueError, RecursionError):
                parsed = None
            if isinstance(parsed, dict):
                return failure_of(parsed)
        if _FAIL_START.match(stripped) or _TRACEBACK in stripped:
            return stripped
        return None
    if isinstance(result, dict):
        return _dict_failure(result)
    return None


def _dict_failure(result: dict) -> str | None:
    status = result.get("status")
    code = result.get("exit_code", result.get("returncode"))
    failed = (isinstance(status, str) and status.strip().lower() in _FAIL_STATUSES) or bool(result.get("error"))
    failed = failed or (isinstance(code, int) and not isinstance(code, bool) and code != 0)
    if not failed:
        return None
    for name in ("error", "msg", "message", "stderr", "detail"):
        value = result.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return f"exit code {code}" if isinstance(code, int) else json.dumps(result, ensure_ascii=False, default=str)


def error_line(text: str) -> str:
    """The line of an error that says what went wrong: a traceback's last, else the first."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[-1] if _TRACEBACK in text else lines[0]


def error_shape(text: str) -> str:
    """The error with what varies between calls folded: `open <path>: errno <n>`."""
    shape = error_line(text)[:1000]
    for pattern, replacement in _SHAPE_RULES:
        shape = pattern.sub(replacement, shape)
    shape = " ".join(shape.split())
    return shape[:SHAPE_CHARS] if shape else "(no message)"


def args_text(args: Any, scrub: Callable[[str], str]) -> str:
    """The arguments of a call as short, redacted JSON (GenericAgent's own `_index`-style keys left out)."""
    if isinstance(args, dict):
        args = {str(k): v for k, v in list(args.items())[:50] if not str(k).startswith("_")}
    try:
        text = json.dumps(args, ensure_ascii=False, default=str, sort_keys=True)
    except (ValueError, RecursionError):
        text = str(args)
    text = scrub(text[: ARGS_CHARS * 4])
    return text if len(text) <= ARGS_CHARS else text[: ARGS_CHARS - 1] + "…"


def make_event(tool: str, args: Any, error: str | None, scrub: Callable[[str], str], session: str = "",
               call: str = "", time: str = "", source: str = "") -> ToolEvent:
    """An event from what a caller knows; `error` None or "" for a call that succeeded."""
    if not error:
        return ToolEvent(tool, True, session=session, call=call, time=time, source=source)
    error = scrub(error_line(error) if _TRACEBACK in error else error.strip())
    return ToolEvent(tool, False, error[:ERROR_CHARS], error_shape(error), args_text(args, scrub), session, call,
                     time, source)


def event_from_request(data: bytes, scrub: Callable[[str], str], now: str) -> ToolEvent:
    """The event `memctl tools record` read on stdin: one JSON object, `tool` required, then
    `args`, `ok`, `error` (or `result`, classified here when `ok` is absent), `session`, `call`,
    `time`. Anything else is refused with one line (UsageError)."""
    from memctl.core.errors import UsageError

    try:
        request = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError("the event is not UTF-8 text; send one JSON object") from None
    except (ValueError, RecursionError):
        raise UsageError("the event is not JSON; send one object like "
                         '{"tool": "web_fetch", "ok": false, "error": "timeout"}') from None
    if not isinstance(request, dict):
        raise UsageError(f"the event must be a JSON object, not {type(request).__name__}")
    tool = request.get("tool")
    if not isinstance(tool, str) or not _TOOL_NAME.fullmatch(tool.strip()):
        raise UsageError(f"`tool` must be a name of 1-{TOOL_NAME_CHARS} printable characters")
    ok = request.get("ok")
    if ok is not None and not isinstance(ok, bool):
        raise UsageError("`ok` must be true or false")
    error = _text_field(request, "error", ERROR_CHARS * 4)
    if ok is None:
        error = error or failure_of(request.get("result")) or ""
    elif ok:
        error = ""
    else:
        error = error or "(no message)"
    return make_event(tool.strip(), request.get("args"), error, scrub, _text_field(request, "session", FIELD_CHARS),
                      _text_field(request, "call", FIELD_CHARS), _text_field(request, "time", 40) or now, "plugin")


def _text_field(request: dict, name: str, limit: int) -> str:
    from memctl.core.errors import UsageError

    value = request.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        if name == "error":
            return json.dumps(value, ensure_ascii=False, default=str)[:limit]
        raise UsageError(f"`{name}` must be a string")
    value = "".join(char for char in value if char >= " " or char in "\n\t")
    return value.strip()[:limit]
