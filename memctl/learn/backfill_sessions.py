"""The archived sessions `memctl learn` reads, and each one's history as `Message`s.

Sessions are those of the L4 manifest, in the order archived (memctl's own, rebuilt byte for
byte from their zip; GenericAgent's adopted members, whose text keeps the markers and bodies; and
those known only from a GenericAgent `all_histories.txt` block), then the loose compressed
files `memctl compress` wrote that no archive run has packed yet. A session is identified by
its sha256, never its name. Its messages: each Prompt's user request (tool results and the
working-memory anchor left out), each Response's prose or, without prose, its `<summary>`;
for a history-only session its `[USER]:` and `[Agent]` lines.

A session the GenericAgent plugin already fed to the write link as it ran (its `turn` buffers,
`sessions/ga-*.jsonl`, hold messages inside the session's start and end) was learned live:
`live_spans` gives those buffers' first and last message times.
"""

from __future__ import annotations

import io
from typing import Iterator

from memctl.core.config import Layout
from memctl.l4.history import prompt_parts, response_parts
from memctl.l4.logs import RawEntry, iter_log
from memctl.learn.candidates import Message

MESSAGE_CHARS = 65536  # a longer message is cut (a pasted log is not a memory)
PLUGIN_SESSION_PREFIX = "ga-"  # the session ids the GenericAgent plugin (ops/templates/memctl_recall.py) gives


class ArchivedSession:
    """One archived session: its name, sha256 (its identity), start and end (ISO, "" unknown) and
    how to read it (`ref`: an `l4.sessions.SessionRef`)."""

    __slots__ = ("name", "sha256", "start", "end", "ref")

    def __init__(self, name: str, sha256: str, start: str, end: str, ref) -> None:
        self.name, self.sha256, self.start, self.end, self.ref = name, sha256, start, end, ref

    @property
    def history_only(self) -> bool:
        return self.ref.record is not None and not self.ref.record.zip

    def __repr__(self) -> str:
        return f"ArchivedSession({self.name!r}, {self.sha256[:12]!r})"


def archived_sessions(layout: Layout) -> list[ArchivedSession]:
    """Every archived session once (a manifest line repeated for the same bytes counts once)."""
    from memctl.l4.manifest import iter_manifest
    from memctl.l4.sessions import SessionRef

    sessions: dict[str, ArchivedSession] = {}
    for record in iter_manifest(layout):
        if record.sha256 and record.sha256 not in sessions:
            sessions[record.sha256] = ArchivedSession(record.name, record.sha256, record.start, record.end,
                                                      SessionRef(record.name, record))
    for session in _loose_sessions(layout):
        sessions.setdefault(session.sha256, session)
    return list(sessions.values())


def _loose_sessions(layout: Layout) -> Iterator[ArchivedSession]:
    from memctl.l4.codec import is_session_header, read_trailer
    from memctl.l4.sessions import SessionRef

    folder = layout.l4_dir
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.txt")):
        if path.is_symlink() or not path.is_file() or path.name == layout.histories.name:
            continue
        data = path.read_bytes()
        trailer = read_trailer(data) if is_session_header(data) else None
        if trailer is not None:
            yield ArchivedSession(path.stem, trailer[0], "", "", SessionRef(path.stem, None, path))


def session_entries(layout: Layout, session: ArchivedSession) -> list[RawEntry]:
    """The session's log entries, read back from where L4 keeps it."""
    from memctl.l4.adopt import GENERICAGENT
    from memctl.l4.sessions import write_compressed, write_raw

    if session.history_only:
        return []
    buffer = io.BytesIO()
    record = session.ref.record
    if record is not None and record.origin == GENERICAGENT:
        write_compressed(layout, session.ref, buffer.write)  # GenericAgent's member: markers and bodies kept
    else:
        write_raw(layout, session.ref, buffer.write)
    buffer.seek(0)
    return [item for item in iter_log(buffer) if isinstance(item, RawEntry)]


def session_messages(layout: Layout, session: ArchivedSession, entries: list[RawEntry]) -> list[Message]:
    if session.history_only:
        return _history_messages(layout, session)
    messages: list[Message] = []
    for number, entry in enumerate(entries):
        if entry.kind == "Prompt":
            role, text = "user", prompt_parts(entry).request
        else:
            parts = response_parts(entry)
            role, text = "assistant", "\n".join(part for part in (parts.summary, parts.answer) if part)
        if text.strip():
            messages.append(Message(session.name, f"e{number}", len(messages), role, text[:MESSAGE_CHARS],
                                    entry.timestamp.isoformat()))
    return messages


def _history_messages(layout: Layout, session: ArchivedSession) -> list[Message]:
    from memctl.l4.history import last_history_blocks

    lines = last_history_blocks(layout.histories, {session.name}).get(session.name, [])
    messages = []
    for number, line in enumerate(lines):
        if line.startswith("[USER]: "):
            role, text = "user", line[len("[USER]: "):]
        elif line.startswith("[Agent] "):
            role, text = "assistant", line[len("[Agent] "):]
        else:
            continue
        messages.append(Message(session.name, f"h{number}", len(messages), role, text, session.start))
    return messages


def live_spans(layout: Layout) -> list[tuple[str, str]]:
    """(first, last) message time, to the minute, of every session the plugin fed live."""
    import json
    from pathlib import Path

    from memctl.learn.buffer import sessions_dir

    spans = []
    for path in sorted(Path(sessions_dir(layout)).glob(f"{PLUGIN_SESSION_PREFIX}*.jsonl")):
        if path.is_symlink():
            continue
        times = []
        for raw in path.read_bytes().split(b"\n"):
            try:
                times.append(str(json.loads(raw).get("time", ""))[:16])
            except (ValueError, AttributeError, RecursionError):
                continue
        times = [t for t in times if t]
        if times:
            spans.append((min(times), max(times)))
    return spans


def learned_live(spans: list[tuple[str, str]], session: ArchivedSession) -> bool:
    """Whether a live span falls inside the session's start and end (to the minute)."""
    if not session.start:
        return False
    start, end = session.start[:16], (session.end or session.start)[:16]
    return any(first <= end and last >= start for first, last in spans)
