"""`recent`: the last N archived sessions, newest first (SharpAgent's short-term layer).

What a fresh agent needs to know "what was I doing": for each session its first request, its
final answer and its key lines, at most `MAX_SUMMARY_BYTES` each. The manifest gives names
and times, `all_histories.txt` the request and key lines, and the session itself (decoded
from its zip) the final answer: the prose of its last Response, which the history keeps only
as a summary line.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from typing import Callable

from memctl.core.config import Layout
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

    def to_json(self) -> dict:
        return {"name": self.name, "start": self.start, "end": self.end, "request": self.request,
                "answer": self.answer, "key_lines": self.key_lines, "text": self.text,
                "bytes": len(self.text.encode("utf-8", "surrogateescape"))}


def latest_records(layout: Layout, n: int) -> list[ManifestRecord]:
    """The n most recent archived sessions (by end, then start), newest first; one per name."""
    by_name: dict[str, ManifestRecord] = {}
    for record in iter_manifest(layout):
        by_name[record.name] = record
    ordered = sorted(by_name.values(), key=lambda r: (r.end or r.start, r.start, r.archived_at, r.name), reverse=True)
    return ordered[: max(0, n)]


def recent(layout: Layout, n: int = 5, scrub: Callable[[str], str] = redact,
           max_bytes: int = MAX_SUMMARY_BYTES) -> list[RecentSession]:
    records = latest_records(layout, n)
    wanted = {r.name for r in records}
    histories = last_history_blocks(layout.histories, wanted)
    return [summarize(layout, record, histories.get(record.name, []), scrub, max_bytes) for record in records]


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


def _render(session: RecentSession, key_lines: list[str]) -> str:
    start, end = session.start.replace("T", " ")[:16], session.end.replace("T", " ")[:16]
    when = f"{start} – {end[11:] if end[:10] == start[:10] else end}"
    out = [f"## {session.name} ({when})", f"request: {session.request or '-'}", f"answer: {session.answer or '-'}"]
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
