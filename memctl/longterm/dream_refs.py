"""The references a dream folds in: `.memctl/refs.log` read through the offset cursor.

Search appends `<ISO time>\\t<entry id>` lines to `.memctl/refs.log` without the lock (see
`memctl.longterm.refs`). A dream folds the lines after `.memctl/refs.offset` into each entry's
`refs`/`last_ref` (`fold`, pure: the same result in plan and apply) and counts the whole log's
lines inside the archive and forget windows (`Refs.count_since`). This module owns the
`Refs` value, reading it, the offset cursor, and the ISO-time parsing the windows use.
On a server memory the log is the `refs` table every machine's searches write to, and the
cursor its `refs_cursor` row (`memctl.longterm.pg_shared`), read and written in the dream's
transaction.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from memctl.core.config import Layout
from memctl.core.fsutil import atomic_write_text, ensure_private_dir
from memctl.longterm.entries import Entry
from memctl.longterm import pg_shared
from memctl.longterm.refs import read_refs


@dataclass
class Refs:
    """What the reference log says: new references to fold, and counts inside the windows."""

    new: dict[str, tuple[int, str]] = field(default_factory=dict)  # id -> (count, last time)
    recent: dict[str, list[str]] = field(default_factory=dict)  # id -> ISO times (whole log)
    offset_before: int = 0
    offset_after: int = 0

    def count_since(self, entry_id: str, since: datetime) -> int:
        return sum(1 for t in self.recent.get(entry_id, ()) if parse_time(t) and parse_time(t) >= since)


def parse_time(text: str) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if value.tzinfo is not None:
        value = value.astimezone().replace(tzinfo=None)
    return value


def read_offset(layout: Layout) -> int:
    server = pg_shared.server_of(layout)
    if server is not None:
        return pg_shared.refs_cursor(server, server.schema)
    try:
        return int((layout.state_dir / "refs.offset").read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def write_offset(layout: Layout, offset: int) -> None:
    server = pg_shared.server_of(layout)
    if server is not None:
        pg_shared.set_refs_cursor(server, server.schema, offset)
        return
    ensure_private_dir(layout.state_dir)
    atomic_write_text(layout.state_dir / "refs.offset", f"{offset}\n")


def load_refs(layout: Layout) -> Refs:
    server = pg_shared.server_of(layout)
    if server is None:
        offset = read_offset(layout)
        everything, fresh, end = read_refs(layout.refs_log, offset)
    else:
        with server.transaction():  # the cursor and the rows of one moment
            offset = pg_shared.refs_cursor(server, server.schema)
            rows = pg_shared.read_refs(server, server.schema)
        everything = [(at, entry_id) for _, at, entry_id in rows]
        fresh = [(at, entry_id) for seq, at, entry_id in rows if seq > offset]
        end = rows[-1][0] if rows else offset
    refs = Refs(offset_before=offset, offset_after=end)
    for when, entry_id in everything:
        refs.recent.setdefault(entry_id, []).append(when)
    counts: dict[str, int] = Counter()
    last: dict[str, str] = {}
    for when, entry_id in fresh:
        counts[entry_id] += 1
        if when > last.get(entry_id, ""):
            last[entry_id] = when
    refs.new = {i: (n, last[i]) for i, n in counts.items()}
    return refs


def fold(entry: Entry, refs: Refs) -> Entry:
    """The entry with the new references added (pure; the same result in plan and apply)."""
    found = refs.new.get(entry.id)
    if not found:
        return entry
    count, last = found
    return entry.replace(refs=entry.refs + count, last_ref=max(entry.last_ref or "", last), extra=dict(entry.extra))
