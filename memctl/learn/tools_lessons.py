"""A tool failure that repeats becomes a `tool` entry in L5, the lesson an agent reads next time.

A failure shape seen `[tools] lesson_after` (N) times makes its tool's lesson due; it is due
again each time that count doubles (N, 2N, 4N, …), so a tool failing all day rewrites its lesson
a handful of times, not at every call. The lesson is one entry per tool (type `tool`, a merge
type: topic = the tool), naming its repeated failure shapes with counts, the last date and
the last failed arguments, its `source` naming the sessions; a newer lesson supersedes the
older (which goes to L6). A lesson whose text L5 already holds is not written again, and one
the user forgot stays forgotten.

`record_events` is the collector's one write: the new events appended, the lessons due
written, the summary saved, all under one hold of the writer lock.
"""

from __future__ import annotations

import math

from typing import Iterable

from memctl.core.config import Settings
from memctl.learn.tools import ToolEvent
from memctl.learn.tools_store import Summary, ToolStats, append_events, read_summary, save_summary

LESSON_TYPE = "tool"
LESSON_CONFIDENCE = 6
SHAPES_IN_LESSON = 3
SOURCE_PREFIX = "tool_usage"


def stage(count: int, after: int) -> int:
    """-1 below the threshold, then 0, 1, 2 … at after, 2×after, 4×after …"""
    return -1 if count < after else int(math.log2(count / after))


def due_tools(summary: Summary, after: int) -> list[str]:
    due = []
    for name, stats in sorted(summary.tools.items()):
        written = summary.lessons.get(name, {})
        if any(stage(s.count, after) > written.get(shape, -1) for shape, s in stats.shapes.items()):
            due.append(name)
    return due


def repeated_shapes(stats: ToolStats, after: int):
    return [(shape, s) for shape, s in stats.top_shapes(len(stats.shapes)) if s.count >= after]


def lesson_text(stats: ToolStats, after: int) -> str:
    """"`web_fetch` fails with "…" (3 of 5 calls, last 2026-12-01), e.g. {"url": …}; …"."""
    parts = []
    for shape, s in repeated_shapes(stats, after)[:SHAPES_IN_LESSON]:
        example = f", e.g. {s.args[-1]}" if s.args else ""
        parts.append(f'fails with "{shape}" ({s.count} of {stats.calls} calls, last {s.last[:10]}){example}')
    return f"`{stats.tool}` " + "; also ".join(parts)


def lesson_source(stats: ToolStats, after: int) -> str:
    sessions = []
    for _, s in repeated_shapes(stats, after):
        sessions += [name for name in s.sessions if name not in sessions]
    return f"{SOURCE_PREFIX}: " + (", ".join(sessions[-5:]) if sessions else "tool calls")


def write_lessons(settings: Settings, summary: Summary, now: str) -> list[dict]:
    """Write the lessons that are due (the writer lock held); one report a lesson."""
    from memctl.longterm.policies import normalize
    from memctl.longterm.remember import ForgottenFact, RememberRequest, prepared, remember_locked
    from memctl.longterm.store import open_store

    after = int(settings.get("tools", "lesson_after"))
    written = []
    store = None
    for name in due_tools(summary, after):
        stats = summary.tools[name]
        text = lesson_text(stats, after)
        store = store or open_store(settings.layout, settings)
        store.lock_types([LESSON_TYPE])
        current = store.active.current(LESSON_TYPE, name)
        report = {"tool": name, "text": text}
        if current is not None and normalize(current.entry.text) == normalize(text):
            report["action"] = "unchanged"
        else:
            request = RememberRequest(text, LESSON_TYPE, name, LESSON_CONFIDENCE, lesson_source(stats, after))
            try:
                result = remember_locked(settings, store, prepared(settings, request), now)
                report.update(action=result.action, id=result.entry.id)
            except ForgottenFact:
                report["action"] = "forgotten"
        summary.lessons[name] = {shape: stage(s.count, after) for shape, s in stats.shapes.items()
                                 if s.count >= after}
        written.append(report)
    return written


def record_events(settings: Settings, events: Iterable[ToolEvent], now: str, wait: float = 0.0) -> dict:
    """Append the events not counted yet and write the lessons they make due. Each step is safe
    to repeat, so a run killed anywhere is finished by the next (the summary is caught up from
    the file, a lesson already in L5 is not written again)."""
    from memctl.longterm.recovery import writing

    events = list(events)
    layout = settings.layout
    with writing(layout, wait):
        summary = read_summary(layout)
        report = record_locked(settings, summary, events, now)
        save_summary(layout, summary)
    return report


def record_locked(settings: Settings, summary: Summary, events: list[ToolEvent], now: str) -> dict:
    """`record_events`' steps, the writer lock held and `summary` caught up (`read_summary`);
    saving the summary is left to the caller (`memctl learn` saves it once, at the end)."""
    fresh = append_events(settings.layout, summary, events)
    lessons = write_lessons(settings, summary, now)
    return {"recorded": len(fresh), "duplicates": len(events) - len(fresh), "lessons": lessons}
