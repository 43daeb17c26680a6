"""`memctl learn`: the write link run over archived sessions, resumably (design.md §9a).

Each archived session (`learn.backfill_sessions`) not learned before is read back, its history
turned into `Message`s, its candidates extracted (`learn.extract.extract_candidates`) and
routed into L5 (`learn.route.route`, whose entry ids are derived from the candidate and its
messages), and its tool calls folded into the collector (`learn.tools_lessons.record_locked`,
a call counted once whether the plugin or the log reported it). Only then is the session
checkpointed: one line in `.memctl/learned_sessions.jsonl` (sha256, name, counts), appended and
fsynced under the writer lock. A run killed anywhere repeats at most the session it was in,
and repeating it writes nothing twice (the same entry ids are found done, the same call ids
counted already); a second run skips every checkpointed session. No session buffer is kept:
archived sessions are already on disk, whole.

A session the GenericAgent plugin fed to the write link as it ran is not extracted again (its
facts' `seen` would count twice); of its tool calls, those without the agent's id (which the
plugin could not name either) are left out, the others count once by their ids.
"""

from __future__ import annotations

import json
import time
import zipfile
import zlib
from pathlib import Path
from typing import Callable

from memctl.core import faults
from memctl.core.config import Layout, Settings
from memctl.core.errors import LockBusy, MemctlError, WriteFailed
from memctl.learn.backfill_sessions import (ArchivedSession, archived_sessions, learned_live, live_spans,
                                            session_entries, session_messages)

CHECKPOINT_FILE = "learned_sessions.jsonl"
UNREADABLE = (MemctlError, OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error)


def checkpoint_path(layout: Layout) -> Path:
    return Path(layout.state_dir) / CHECKPOINT_FILE


class LearnReport:
    """What a run did; `to_dict` is the `--json` summary."""

    def __init__(self) -> None:
        self.sessions = self.learned_before = self.learned = self.learned_live = self.messages = 0
        self.candidates = self.tool_events = self.lessons = 0
        self.actions: dict[str, int] = {}  # what routing did: added, superseded, seen, conflict, done, skipped
        self.errors: list[str] = []
        self.notes: list[str] = []
        self.seconds = 0.0
        self.pending: list[str] = []  # a dry run: the sessions a run would learn

    def to_dict(self) -> dict:
        data = {name: getattr(self, name) for name in ("sessions", "learned_before", "learned", "learned_live", "messages", "candidates",
                                                      "actions", "tool_events", "lessons", "errors", "notes")}
        data["seconds"] = round(self.seconds, 3)
        data["sessions_per_second"] = round(self.learned / self.seconds, 2) if self.seconds and self.learned else 0.0
        return data


def learned_sessions(layout: Layout) -> set[str]:
    """The sha256 of every session checkpointed (a torn or foreign line is not a checkpoint)."""
    try:
        data = checkpoint_path(layout).read_bytes()
    except FileNotFoundError:
        return set()
    done = set()
    for raw in data.split(b"\n")[:-1]:
        try:
            done.add(str(json.loads(raw)["sha256"]))
        except (ValueError, KeyError, TypeError, RecursionError):
            continue
    return done


def learn_archived(settings: Settings, now: str, limit: int | None = None, wait: float = 30.0,
                   dry_run: bool = False, progress: Callable[[int, int], None] | None = None) -> LearnReport:
    layout = settings.layout
    started = time.monotonic()
    report = LearnReport()
    sessions = archived_sessions(layout)
    done = learned_sessions(layout)
    todo = [s for s in sessions if s.sha256 not in done]
    report.sessions, report.learned_before = len(sessions), len(sessions) - len(todo)
    todo = todo[:limit] if limit is not None else todo
    if dry_run:
        report.pending = [s.name for s in todo]
        return report
    run = _Run(settings, now, wait, live_spans(layout), report)
    try:
        for number, session in enumerate(todo, 1):
            try:
                run.learn(session)
            except (LockBusy, WriteFailed):
                raise  # every later session would meet it too; the ones checkpointed stay learned
            except UNREADABLE as exc:  # this session's bytes: the others are still learned
                report.errors.append(f"{session.name}: {_one_line(exc)}")
            if progress is not None:
                progress(number, len(todo))
    finally:
        run.save_tool_summary()
    report.seconds = time.monotonic() - started
    return report


class _Run:
    """One `learn` run: its options, and the tool summary it keeps up to date between sessions
    (saved once, at the end: it is derived, and a killed run's next reader sums the file again)."""

    def __init__(self, settings: Settings, now: str, wait: float, live: list[tuple[str, str]], report: LearnReport) -> None:
        from memctl.core.redact import redactor_for

        self.settings, self.now, self.wait, self.live, self.report = settings, now, wait, live, report
        self.scrub = redactor_for(settings)
        self.summary = None

    def learn(self, session: ArchivedSession) -> None:
        """Extract and route, then (one hold of the writer lock) count the tool calls and checkpoint."""
        from memctl.learn.route import route
        from memctl.learn.session import extracted
        from memctl.learn.tools_lessons import record_locked
        from memctl.learn.tools_logs import tool_events
        from memctl.learn.tools_store import read_summary
        from memctl.longterm.recovery import writing

        layout = self.settings.layout
        entries = session_entries(layout, session)
        messages = session_messages(layout, session, entries)
        events = tool_events(entries, session.name, self.scrub)
        if learned_live(self.live, session):  # the plugin fed its turns and tool calls as it ran
            self.report.learned_live += 1
            messages = []
            events = [e for e in events if not e.call.startswith(f"{session.name}#")]  # the id-less ones
        candidates, notes = extracted(self.settings, messages)
        routed = route(self.settings, candidates, self.now, self.wait)
        faults.checkpoint("learn: session routed")
        with writing(layout, self.wait):
            self.summary = read_summary(layout, self.summary)
            tools = record_locked(self.settings, self.summary, events, self.now)
            faults.checkpoint("learn: session tools")
            _checkpoint(layout, session, len(messages), len(routed))
        self._count(len(messages), candidates, routed, notes, tools)
        self.report.learned += 1

    def _count(self, messages: int, candidates: list, routed: list, notes: list[str], tools: dict) -> None:
        report = self.report
        report.messages += messages
        report.candidates += len(candidates)
        for routed_one in routed:
            report.actions[routed_one.action] = report.actions.get(routed_one.action, 0) + 1
        report.tool_events += tools["recorded"]
        report.lessons += sum(1 for lesson in tools["lessons"] if lesson.get("action") in ("added", "superseded"))
        report.notes = (report.notes + notes + [r.note for r in routed if r.note])[:20]

    def save_tool_summary(self) -> None:
        from memctl.learn.tools_store import save_summary
        from memctl.longterm.recovery import writing

        if self.summary is not None:
            with writing(self.settings.layout, self.wait):
                save_summary(self.settings.layout, self.summary)


def _checkpoint(layout: Layout, session: ArchivedSession, messages: int, candidates: int) -> None:
    """The session's line in the checkpoint file (the writer lock held)."""
    from memctl.core import clock
    from memctl.core.jsonl import append_lines, torn_dir

    line = json.dumps({"sha256": session.sha256, "name": session.name, "messages": messages,
                       "candidates": candidates, "at": clock.iso()}, ensure_ascii=False) + "\n"
    append_lines(checkpoint_path(layout), line.encode("utf-8"), torn_dir(Path(layout.state_dir)))


def _one_line(exc: Exception) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, MemctlError) else f"{type(exc).__name__}: {text}"
