"""`recent`: the last sessions, newest first (SharpAgent's short-term layer).

First the L2 short-term window (`learn.short_term`: the sessions the write link disposed, each
with its summary and tags, within `[learn] short_term_days`), then the last archived L4
sessions up to N. What a fresh agent needs to know "what was I doing": for an L4 session its
first request, its final answer and its key lines, at most `MAX_SUMMARY_BYTES` each, and the
words it was about as tags. The manifest gives names
and times, `all_histories.txt` the request and key lines, and the session itself (decoded
from its zip) the final answer: the prose of its last Response, which the history keeps only
as a summary line.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from typing import Callable

from memctl.core.config import Layout, Settings
from memctl.learn.summary import distinctive_words
from memctl.l4.history import last_history_blocks, response_parts
from memctl.l4.logs import RawEntry, iter_log
from memctl.l4.manifest import ManifestRecord, iter_manifest
from memctl.core.redact import redact

MAX_SUMMARY_BYTES = 2048
REQUEST_CHARS = 400
ANSWER_CHARS = 600
KEY_LINE_CHARS = 200


@dataclass
class RecentSession:
    name: str
    start: str
    end: str
    request: str
    answer: str
    key_lines: list[str] = field(default_factory=list)
    text: str = ""  # the rendered summary, <= MAX_SUMMARY_BYTES in UTF-8
    tags: list[str] = field(default_factory=list)
    layer: str = "L4"  # L4: an archived session; L2: a disposed session of the short-term window

    def to_json(self) -> dict:
        return {"name": self.name, "layer": self.layer, "start": self.start, "end": self.end,
                "request": self.request, "answer": self.answer, "key_lines": self.key_lines, "tags": self.tags,
                "text": self.text, "bytes": len(self.text.encode("utf-8", "surrogateescape"))}


def latest_records(layout: Layout, n: int) -> list[ManifestRecord]:
    """The n most recent archived sessions (by end, then start), newest first; one per name."""
    by_name: dict[str, ManifestRecord] = {}
    for record in iter_manifest(layout):
        by_name[record.name] = record
    ordered = sorted(by_name.values(), key=lambda r: (r.end or r.start, r.start, r.archived_at, r.name), reverse=True)
    return ordered[: max(0, n)]


def recent(layout: Layout, n: int = 5, scrub: Callable[[str], str] = redact,
           max_bytes: int = MAX_SUMMARY_BYTES, settings: Settings | None = None) -> list[RecentSession]:
    """The short-term window first (with `settings`: its bounds), then archived sessions, n in all."""
    window = short_term_sessions(settings, scrub)[:max(0, n)] if settings is not None else []
    records = latest_records(layout, n - len(window))
    wanted = {r.name for r in records}
    histories = last_history_blocks(layout.histories, wanted)
    return window + [summarize(layout, record, histories.get(record.name, []), scrub, max_bytes) for record in records]


def short_term_sessions(settings: Settings, scrub: Callable[[str], str] = redact) -> list[RecentSession]:
    """The L2 short-term window, newest first, as sessions."""
    from memctl.core import clock
    from memctl.learn.short_term import read_window

    sessions = []
    for record in read_window(settings, clock.now()):
        tags = [str(tag) for tag in record.get("tags") or [] if isinstance(tag, str)]
        session = RecentSession(str(record["session"]), str(record.get("start", "")), str(record.get("end", "")),
                                "", "", tags=tags, layer="L2")
        when = _when(session.start or str(record.get("closed", "")), session.end)
        heading = f"## {session.name} ({when})" + (f" [{', '.join(tags)}]" if tags else "")
        session.text = f"{heading}\n{scrub(str(record.get('summary', ''))).rstrip()}\n"
        sessions.append(session)
    return sessions


def summarize(layout: Layout, record: ManifestRecord, history: list[str],
              scrub: Callable[[str], str] = redact, max_bytes: int = MAX_SUMMARY_BYTES) -> RecentSession:
    users = [ln for ln in history if ln.startswith("[USER]:")]
    agents = [ln for ln in history if ln.startswith("[Agent]")]
    request = users[0][len("[USER]:"):].strip() if users else ""
    answer = _final_answer(layout, record) or (agents[-1][len("[Agent]"):].strip() if agents else "")
    request, answer = scrub(_clip(request, REQUEST_CHARS)), scrub(_clip(answer, ANSWER_CHARS))
    first_user = users[0] if users else None
    key_lines = [scrub(_clip(ln, KEY_LINE_CHARS)) for ln in history if ln is not first_user]
    session = RecentSession(record.name, record.start, record.end, request, answer)
    session.tags = distinctive_words([request] * 2 + [answer] + key_lines)
    session.key_lines, session.text = _fit(session, key_lines, max_bytes)
    return session


def _final_answer(layout: Layout, record: ManifestRecord) -> str:
    """The prose of the session's last Response that has any; '' if the session cannot be read.
    A session GenericAgent archived has no raw bytes, but its member keeps every Response."""
    from memctl.l4.sessions import SessionRef, write_compressed, write_raw

    write = write_compressed if record.origin else write_raw
    with tempfile.SpooledTemporaryFile(max_size=8 << 20) as raw:
        try:
            write(layout, SessionRef(record.name, record), raw.write)
        except Exception:  # a damaged session (IntegrityError, BadZipFile, zlib.error): verify reports it
            return ""
        raw.seek(0)
        answer = ""
        for entry in iter_log(raw):
            if isinstance(entry, RawEntry) and entry.kind == "Response":
                text = response_parts(entry).answer
                if text.strip():
                    answer = text
    return " ".join(answer.split())


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _when(start: str, end: str) -> str:
    start, end = start.replace("T", " ")[:16], end.replace("T", " ")[:16]
    return f"{start} – {end[11:] if end[:10] == start[:10] else end}"


def _render(session: RecentSession, key_lines: list[str]) -> str:
    tags = f" [{', '.join(session.tags)}]" if session.tags else ""
    out = [f"## {session.name} ({_when(session.start, session.end)}){tags}", f"request: {session.request or '-'}",
           f"answer: {session.answer or '-'}"]
    if key_lines:
        out.append("key lines:")
        out += [f"  {line}" for line in key_lines]
    return "\n".join(out) + "\n"


def _fit(session: RecentSession, key_lines: list[str], max_bytes: int) -> tuple[list[str], str]:
    """As many key lines as fit (first and last ones first: how it started and how it ended)."""
    order = _ends_first(len(key_lines))
    chosen: set[int] = set()
    text = _render(session, [])
    for index in order:
        trial = _render(session, [key_lines[i] for i in sorted(chosen | {index})])
        if _size(trial) <= max_bytes:
            chosen.add(index)
            text = trial
    if _size(text) > max_bytes:  # request and answer alone are too long for a tiny limit
        text = text.encode("utf-8", "surrogateescape")[: max_bytes - 4].decode("utf-8", "ignore") + "…\n"
    return [key_lines[i] for i in sorted(chosen)], text


def _ends_first(n: int) -> list[int]:
    order, low, high = [], 0, n - 1
    while low <= high:
        order.append(high)
        if low != high:
            order.append(low)
        low, high = low + 1, high - 1
    return order


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))
