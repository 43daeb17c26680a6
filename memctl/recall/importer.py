"""`import`: bulk-load JSON Lines (`text`, optional `id`, `date`, `session`, `type`, `speaker`).

Bulk history goes straight to L6 (SharpAgent: it skips the layers) or, with `--layer L5`, to
L5. A line that cannot be used is reported with its number; every good line is kept. Ids
given by the source are kept so that search results can be matched back to them; an id
already present in the target store is reported as a bad line rather than duplicated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from memctl.core import clock
from memctl.core.config import Layout
from memctl.longterm.entries import Entry, new_id
from memctl.longterm.store import open_store
from memctl.core.errors import UsageError
from memctl.core.fsutil import WriterLock
from memctl.core.redact import redact

LAYERS = ("L5", "L6")
OPTIONAL_FIELDS = ("date", "session", "type", "speaker")


@dataclass
class BadLine:
    number: int
    reason: str


@dataclass
class ImportReport:
    layer: str
    imported: int = 0
    bad: list[BadLine] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"type": "summary", "layer": self.layer, "imported": self.imported, "bad_lines": len(self.bad),
                "bad": [{"line": b.number, "reason": b.reason} for b in self.bad]}


def _check_encodable(data: dict) -> None:
    """`"\\ud800"` is valid JSON but no text: a lone surrogate cannot be written as UTF-8."""
    for name, value in data.items():
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                code = ord(value[exc.start])
                raise ValueError(f"{name!r} holds a lone surrogate (\\u{code:04x}), not text") from None


def parse_line(raw: bytes, default_type: str, known_types: Iterable[str] | None = None) -> Entry:
    """One JSON line -> an Entry, or ValueError saying what is wrong with it."""
    try:
        data = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise ValueError("not an entry: JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    text = data.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("'text' is missing or empty")
    _check_encodable(data)
    entry_id = data.get("id")
    if entry_id is not None and not isinstance(entry_id, (str, int)):
        raise ValueError("'id' must be a string or a number")
    values = {}
    for name in OPTIONAL_FIELDS:
        value = data.get(name)
        if value is not None and not isinstance(value, (str, int, float)):
            raise ValueError(f"{name!r} must be a string")
        values[name] = "" if value is None else str(value)
    entry_type = values.pop("type") or default_type
    if known_types is not None and entry_type not in known_types:
        raise ValueError(f"unknown type {entry_type!r}")
    return Entry(id=str(entry_id) if entry_id is not None else new_id("i"), text=text, type=entry_type, **values)


def import_lines(layout: Layout, lines: Iterable[bytes], layer: str = "L6", default_type: str = "event",
                 source: str = "import", known_types: Iterable[str] | None = None,
                 extra_patterns: tuple[str, ...] = (), lock_wait: float = 0.0) -> ImportReport:
    if layer not in LAYERS:
        raise UsageError(f"--layer must be L5 or L6, not {layer!r}")
    report = ImportReport(layer=layer)
    stamp = clock.iso()
    parsed: list[tuple[int, Entry]] = []
    types = set(known_types) if known_types is not None else None
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            entry = parse_line(raw, default_type, types)
        except ValueError as exc:
            report.bad.append(BadLine(number, str(exc)))
            continue
        entry.text = redact(entry.text, extra_patterns)
        entry.created = entry.updated = stamp
        entry.source = source
        if layer == "L6":
            entry.left_at, entry.reason = stamp, "imported"
        parsed.append((number, entry))
    store = open_store(layout)
    target = store.active if layer == "L5" else store.archive
    with WriterLock(layout.lock, wait_seconds=lock_wait):
        taken = target.ids()
        fresh: list[Entry] = []
        for number, entry in parsed:
            if entry.id in taken:
                report.bad.append(BadLine(number, f"id {entry.id!r} is already in {layer}"))
                continue
            taken.add(entry.id)
            fresh.append(entry)
        target.append(fresh)
    report.imported = len(fresh)
    report.ids = [e.id for e in fresh]
    report.bad.sort(key=lambda b: b.number)
    return report


def read_input(path: str) -> list[bytes]:
    """Lines of FILE, or of stdin for `-`."""
    import sys

    if path == "-":
        return sys.stdin.buffer.read().splitlines()
    try:
        return Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
