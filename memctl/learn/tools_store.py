"""Where tool events live: `tool_usage.jsonl` in the root, and the per-tool summary derived from it.

`tool_usage.jsonl` is the truth: one event a line (`learn.tools.ToolEvent`), appended whole and
fsynced by `core.jsonl.append_lines` under the writer lock, never rewritten. The summary,
`.memctl/tool_usage.json` (calls, failures, failure shapes with their last arguments and
sessions, the ids of calls already counted, the lessons written), is derived: it records the
length and the sha256 of the last 4 KiB of the file it summed, so a reader catches up from
there when the file only grew and sums it again from the start otherwise (a lost, stale or
damaged summary costs a re-read, never a wrong count). A repeated call id is counted once.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable

from memctl.core.config import Layout
from memctl.learn.tools import ToolEvent

USAGE_FILE = "tool_usage.jsonl"
SUMMARY_FILE = "tool_usage.json"
SUMMARY_VERSION = 1
TAIL_BYTES = 4096
KEPT_ARGS = 3  # the last failed arguments kept per failure shape
KEPT_SESSIONS = 5


def usage_path(layout: Layout) -> Path:
    return Path(layout.root) / USAGE_FILE


def summary_path(layout: Layout) -> Path:
    return Path(layout.state_dir) / SUMMARY_FILE


class ShapeStats:
    """One failure shape of a tool: how often, when last, the last failed arguments and sessions."""

    __slots__ = ("count", "last", "args", "sessions", "example")

    def __init__(self, count: int = 0, last: str = "", args: list[str] | None = None,
                 sessions: list[str] | None = None, example: str = "") -> None:
        self.count, self.last, self.example = count, last, example
        self.args = [] if args is None else args
        self.sessions = [] if sessions is None else sessions

    def add(self, event: ToolEvent) -> None:
        self.count += 1
        self.last = max(self.last, event.time)
        self.example = event.error or self.example
        _keep_last(self.args, event.args, KEPT_ARGS)
        _keep_last(self.sessions, event.session, KEPT_SESSIONS)


def _keep_last(values: list[str], value: str, limit: int) -> None:
    if value:
        if value in values:
            values.remove(value)
        values.append(value)
        del values[:-limit]


class ToolStats:
    __slots__ = ("tool", "calls", "failures", "last", "shapes")

    def __init__(self, tool: str, calls: int = 0, failures: int = 0, last: str = "",
                 shapes: dict[str, ShapeStats] | None = None) -> None:
        self.tool, self.calls, self.failures, self.last = tool, calls, failures, last
        self.shapes = {} if shapes is None else shapes

    @property
    def failure_rate(self) -> float:
        return self.failures / self.calls if self.calls else 0.0

    def top_shapes(self, limit: int = 3) -> list[tuple[str, ShapeStats]]:
        return sorted(self.shapes.items(), key=lambda item: (-item[1].count, item[0]))[:limit]

    def add(self, event: ToolEvent) -> None:
        self.calls += 1
        self.last = max(self.last, event.time)
        if not event.ok:
            self.failures += 1
            self.shapes.setdefault(event.shape, ShapeStats()).add(event)

    def to_json(self) -> dict[str, Any]:
        """What `memctl tools --json` prints for the tool."""
        return {"tool": self.tool, "calls": self.calls, "failures": self.failures,
                "failure_rate": round(self.failure_rate, 4), "last": self.last,
                "shapes": [{"shape": shape, "count": stats.count, "last": stats.last, "args": stats.args,
                            "sessions": stats.sessions} for shape, stats in self.top_shapes(len(self.shapes))]}


class Summary:
    """The per-tool sums of `tool_usage.jsonl` up to `size` bytes (see the module docstring)."""

    def __init__(self) -> None:
        self.size, self.tail = 0, ""
        self.keys: set[str] = set()
        self.tools: dict[str, ToolStats] = {}
        self.lessons: dict[str, dict[str, int]] = {}  # tool -> failure shape -> stage written (tools_lessons)
        self.rebuilt = False

    def add(self, event: ToolEvent) -> bool:
        """Count the event; False when its call was counted already."""
        key = event.key()
        if key is not None:
            if key in self.keys:
                return False
            self.keys.add(key)
        self.tools.setdefault(event.tool, ToolStats(event.tool)).add(event)
        return True

    def knows(self, event: ToolEvent) -> bool:
        key = event.key()
        return key is not None and key in self.keys

    def to_bytes(self) -> bytes:
        tools = {name: {"calls": t.calls, "failures": t.failures, "last": t.last,
                        "shapes": {shape: {name: getattr(s, name) for name in ShapeStats.__slots__}
                                   for shape, s in t.shapes.items()}} for name, t in self.tools.items()}
        data = {"version": SUMMARY_VERSION, "size": self.size, "tail": self.tail, "keys": sorted(self.keys),
                "tools": tools, "lessons": self.lessons}
        return json.dumps(data, ensure_ascii=False, sort_keys=True).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> "Summary":
        raw = json.loads(data)
        if raw.get("version") != SUMMARY_VERSION:
            raise ValueError("another summary version")
        summary = cls()
        summary.size, summary.tail, summary.keys = int(raw["size"]), str(raw["tail"]), set(raw["keys"])
        summary.lessons = {str(tool): {str(s): int(n) for s, n in shapes.items()}
                           for tool, shapes in raw["lessons"].items()}
        for name, t in raw["tools"].items():
            shapes = {shape: ShapeStats(**s) for shape, s in t["shapes"].items()}
            summary.tools[name] = ToolStats(name, int(t["calls"]), int(t["failures"]), str(t["last"]), shapes)
        return summary


def _tail_digest(handle, size: int) -> str:
    start = max(0, size - TAIL_BYTES)
    handle.seek(start)
    return hashlib.sha256(handle.read(size - start)).hexdigest()


def read_summary(layout: Layout, summary: Summary | None = None) -> Summary:
    """The summary of the whole file as it is now: `summary` (else the saved one) caught up, or
    summed anew when the file is not the one it summed."""
    summary = summary if summary is not None else _saved_summary(layout)
    from memctl.core.fsutil import open_nofollow

    path = usage_path(layout)
    try:
        handle = os.fdopen(open_nofollow(path, os.O_RDONLY), "rb")  # a symlink there is refused, never followed
    except FileNotFoundError:
        return Summary() if summary.size else summary
    with handle:
        size = os.fstat(handle.fileno()).st_size
        if summary.size > size or (summary.size and _tail_digest(handle, summary.size) != summary.tail):
            summary = Summary()
            summary.rebuilt = True
        handle.seek(summary.size)
        complete = summary.size
        for raw in handle:
            if not raw.endswith(b"\n"):
                break  # a torn last line: not an event (the next append sets it aside)
            complete += len(raw)
            event = _parse_line(raw)
            if event is not None:
                summary.add(event)
        summary.size = complete
        summary.tail = _tail_digest(handle, complete)
    return summary


def _saved_summary(layout: Layout) -> Summary:
    try:
        with open(summary_path(layout), "rb") as handle:
            return Summary.from_bytes(handle.read())
    except FileNotFoundError:
        return Summary()
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        summary = Summary()
        summary.rebuilt = True
        return summary


def _parse_line(raw: bytes) -> ToolEvent | None:
    try:
        data = json.loads(raw)
        return ToolEvent.from_dict(data) if isinstance(data, dict) and isinstance(data.get("tool"), str) else None
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def save_summary(layout: Layout, summary: Summary) -> None:
    """Write the derived summary (writer lock held); a failure leaves a stale one, summed again next time."""
    from memctl.core.faults import derived_write
    from memctl.core.fsutil import atomic_write_bytes, ensure_private_dir

    try:
        derived_write("tool-summary")
        ensure_private_dir(Path(layout.state_dir))
        atomic_write_bytes(summary_path(layout), summary.to_bytes())
    except OSError:
        pass  # derived: the next reader re-reads tool_usage.jsonl


def append_events(layout: Layout, summary: Summary, events: Iterable[ToolEvent]) -> list[ToolEvent]:
    """Append the events the summary has not counted, durably, and count them (writer lock held).
    Returns those appended."""
    from memctl.core.jsonl import append_lines, torn_dir

    fresh = []
    for event in events:
        if summary.add(event):
            fresh.append(event)
    if fresh:
        payload = "".join(json.dumps(e.to_dict(), ensure_ascii=False) + "\n" for e in fresh).encode("utf-8")
        start = append_lines(usage_path(layout), payload, torn_dir(Path(layout.state_dir)))
        summary.size = start + len(payload)  # start: after a torn tail set aside, where the summed lines end
        with open(usage_path(layout), "rb") as handle:
            summary.tail = _tail_digest(handle, summary.size)
    return fresh
