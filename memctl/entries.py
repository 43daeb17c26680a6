"""The L5 and L6 entry stores: `long_term.jsonl` and `archive.jsonl`, one JSON entry a line.

This module owns the entry format (design.md §6) and reading/writing the two files. Write
policies, remember/forget and the dream pass build on it; `import` uses it to bulk-load.
Unknown fields are kept as they are, so a newer memctl's entries survive an older one.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Iterator

from memctl.fsutil import append_durably, atomic_write_bytes


@dataclass
class Entry:
    id: str
    text: str
    type: str = "event"
    topic: str = ""
    confidence: float = 5
    refs: int = 0
    last_ref: str = ""
    created: str = ""
    updated: str = ""
    source: str = ""
    seen: int = 1
    # provenance of imported items (conversation turns, messages)
    date: str = ""
    session: str = ""
    speaker: str = ""
    # links
    supersedes: list[str] = field(default_factory=list)
    merged_from: list[str] = field(default_factory=list)
    consolidated_from: list[str] = field(default_factory=list)
    # L6 only: why and when the entry left L5, and which run moved it
    left_at: str = ""
    reason: str = ""
    run: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k != "extra" and v not in ("", [], None)}
        data.update(self.extra)
        for required in ("id", "type", "text"):
            data[required] = getattr(self, required)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Entry":
        known = {f.name for f in fields(cls)} - {"extra"}
        kwargs = {k: v for k, v in data.items() if k in known}
        extra = {k: v for k, v in data.items() if k not in known}
        if "id" not in kwargs or "text" not in kwargs:
            raise ValueError("an entry needs at least 'id' and 'text'")
        return cls(**kwargs, extra=extra)


def new_id(prefix: str = "m") -> str:
    """A short, unique, sortable-enough id: prefix + 12 hex digits."""
    return f"{prefix}{secrets.token_hex(6)}"


def entry_line(entry: Entry) -> bytes:
    return (json.dumps(entry.to_dict(), ensure_ascii=False) + "\n").encode("utf-8")


def iter_entries(path: Path) -> Iterator[Entry]:
    """Entries of a store; a line that does not parse is skipped (the file is never rewritten here)."""
    if not Path(path).exists():
        return
    with open(path, "rb") as handle:
        for raw in handle:
            raw = raw.strip()
            if not raw:
                continue
            try:
                yield Entry.from_dict(json.loads(raw))
            except (ValueError, TypeError):
                continue


def load_entries(path: Path) -> list[Entry]:
    return list(iter_entries(path))


def append_entries(path: Path, entries: Iterable[Entry]) -> int:
    """Append entries with one durable write (the caller holds the writer lock)."""
    payload = b"".join(entry_line(e) for e in entries)
    if payload:
        append_durably(Path(path), payload)
    return payload.count(b"\n")


def write_entries(path: Path, entries: Iterable[Entry]) -> None:
    """Replace a store atomically (the caller holds the writer lock)."""
    atomic_write_bytes(Path(path), b"".join(entry_line(e) for e in entries))
