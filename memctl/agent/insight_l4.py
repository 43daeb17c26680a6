"""L1 after archiving: the L4 index line points at what the newest sessions were about.

An agent reads L1 every turn; `L4: L4_raw_sessions/ …` alone tells it that sessions exist,
not which. So `insight rebuild` adds a `| recent: NAME(request) | …` continuation to the L4
line (the newest sessions by end, each with the first words of its first request, from
all_histories.txt), and every archive run that added sessions rebuilds an existing L1 at once
(`insight.refresh_after_archive`). The rebuild is `insight.rebuild`'s: only memctl's own lines change.
"""

from __future__ import annotations

import re

from memctl.agent.recent import latest_records
from memctl.core.config import Layout
from memctl.l4.history import last_history_blocks

RECENT_SESSIONS = 3
NOTE_CHARS = 28
_NOT_IN_AN_ITEM = re.compile(r"[|()\[\]\s]+")  # the item syntax of an index line, and line breaks


def recent_session_items(layout: Layout, limit: int = RECENT_SESSIONS) -> list[str]:
    """`NAME(first words of its request)` for the newest archived sessions, newest first."""
    records = latest_records(layout, limit)
    blocks = last_history_blocks(layout.histories, {record.name for record in records})
    return [_item(record.name, blocks.get(record.name, [])) for record in records]


def _item(name: str, lines: list[str]) -> str:
    request = next((line[len("[USER]:"):] for line in lines if line.startswith("[USER]:")), "")
    note = _NOT_IN_AN_ITEM.sub(" ", request).strip()
    if len(note) > NOTE_CHARS:
        note = note[:NOTE_CHARS].rstrip() + "…"
    return f"{name}({note})" if note else name

