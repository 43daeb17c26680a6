"""L2 short-term: the last sessions' summaries, `short_term.jsonl` in the memory root (design.md §9a).

One JSON object a line, one line per disposed session: `session`, `start` and `end` (its first
and last message's time), `closed` (when it was disposed), `messages`, `summary` (at most
`[learn] short_term_bytes`), `tags` (what it was about) and `learned` (the entry ids it left in
L5). `dispose` adds its session's line and keeps the window — the last `short_term_sessions`
sessions closed within `short_term_days` — rewriting the file atomically under the writer
lock; a session disposed twice has one line. Readers apply the window again (days pass without
a write). What leaves the window stays in the session's buffer (`sessions/`) and in L5.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from memctl.core import jsoncodec
from memctl.core.config import Settings
from memctl.core.fsutil import WriterLock, atomic_write_bytes, open_nofollow
from memctl.core.jsonl import split_torn
from memctl.core.paths import join

FILE_NAME = "short_term.jsonl"


def short_term_path(layout) -> str:
    return join(str(layout.root), FILE_NAME)


def read_window(settings: Settings, now: datetime) -> list[dict]:
    """The records in the window, newest first."""
    return _window(settings, _records(short_term_path(settings.layout)), now)


def keep(settings: Settings, record: dict, now: datetime, lock_wait: float) -> None:
    """Add (or replace) a session's record and keep the window (the writer lock held)."""
    path = short_term_path(settings.layout)
    with WriterLock(settings.layout.lock, wait_seconds=lock_wait):
        records = [r for r in _records(path) if r.get("session") != record.get("session")] + [record]
        kept = list(reversed(_window(settings, records, now)))
        payload = "".join(jsoncodec.dumps(r) + "\n" for r in kept)
        atomic_write_bytes(path, payload.encode("utf-8", "surrogatepass"))


def _window(settings: Settings, records: list[dict], now: datetime) -> list[dict]:
    sessions = int(settings.get("learn", "short_term_sessions"))
    since = (now - timedelta(days=float(settings.get("learn", "short_term_days")))).isoformat(timespec="seconds")
    recent = [r for r in records if str(r.get("closed", "")) >= since]
    recent.sort(key=lambda r: str(r.get("closed", "")), reverse=True)
    return recent[:sessions]


def _records(path: str) -> list[dict]:
    try:
        fd = open_nofollow(path, os.O_RDONLY)
    except FileNotFoundError:
        return []
    with os.fdopen(fd, "rb") as handle:
        whole, _ = split_torn(handle.read())
    out = []
    for raw in whole.splitlines():
        try:
            record = jsoncodec.loads(raw)
        except (ValueError, TypeError, RecursionError):
            continue
        if isinstance(record, dict) and isinstance(record.get("session"), str):
            out.append(record)
    return out
