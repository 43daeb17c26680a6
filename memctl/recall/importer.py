"""`import`: bulk-load JSON Lines (`text`, optional `id`, `date`, `session`, `type`, `speaker`).

Bulk history goes straight to L6 (SharpAgent: it skips the layers) or, with `--layer L5`, to
L5. A line that cannot be used is reported with its number; every good line is kept. Ids
given by the source are kept so that search results can be matched back to them; an id
already present in the target store is reported as a bad line rather than duplicated, unless
it holds the same text (the line was imported before). A line without an id gets one derived
from its content and fields (and which repeat of them it is), so importing the same file again
adds nothing. The import is journaled (`memctl.longterm.journal`) and recorded, with the
input's sha256, in `.memctl/imports.jsonl`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from memctl.core import clock
from memctl.core.config import Layout
from memctl.core.errors import UsageError, WriteFailed
from memctl.core.jsonl import append_lines, torn_dir
from memctl.core.redact import redact
from memctl.longterm import journal
from memctl.longterm.entries import Entry
from memctl.longterm.recovery import writing
from memctl.longterm.store import open_store

LAYERS = ("L5", "L6")
OPTIONAL_FIELDS = ("date", "session", "type", "speaker")
PROGRESS_EVERY = 500  # lines between two calls of an import's progress
Progress = Callable[[int, int, str], None]


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
    already: int = 0  # lines imported before (same id, same text)

    def to_json(self) -> dict:
        return {"type": "summary", "layer": self.layer, "imported": self.imported, "already": self.already,
                "bad_lines": len(self.bad),
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


def parse_line(raw: bytes, default_type: str, known_types: Iterable[str] | None = None,
               repeats: Counter | None = None) -> Entry:
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
    if entry_id is None:
        entry_id = derived_id(text, entry_type, values, repeats if repeats is not None else Counter())
    return Entry(id=str(entry_id), text=text, type=entry_type, **values)


def derived_id(text: str, entry_type: str, values: dict[str, str], repeats: Counter) -> str:
    """The id of an id-less line: its content, its fields and which repeat of them it is, so
    the same file imported twice gives the same ids."""
    key = json.dumps([text, entry_type, values], ensure_ascii=False, sort_keys=True)
    repeats[key] += 1
    digest = hashlib.sha256(f"{key}\0{repeats[key]}".encode("utf-8", "surrogateescape")).hexdigest()
    return f"i{digest[:12]}"


def import_lines(layout: Layout, lines: Iterable[bytes], layer: str = "L6", default_type: str = "event",
                 source: str = "import", known_types: Iterable[str] | None = None,
                 extra_patterns: tuple[str, ...] = (), lock_wait: float = 0.0,
                 progress: Progress | None = None) -> ImportReport:
    """`progress(done, total, step)` hears the lines read, then the entries checked against
    the target (every PROGRESS_EVERY and at the end of each)."""
    if layer not in LAYERS:
        raise UsageError(f"--layer must be L5 or L6, not {layer!r}")
    report = ImportReport(layer=layer)
    lines = list(lines)
    progress = progress or (lambda done, total, step: None)
    parsed = _parse_all(lines, default_type, known_types, extra_patterns, source, layer, report, progress)
    store = open_store(layout)
    target = store.active if layer == "L5" else store.archive
    with writing(layout, lock_wait):
        store.lock_types(e.type for _, e in parsed)  # two imports of one file must not both add it
        fresh = _fresh(target, parsed, layer, report, progress)
        name = _input_digest(lines)
        intent = journal.begin(layout, "import", name[:16], {"layer": layer, "ids": len(fresh)})
        target.append(fresh)
        record = {"sha256": name, "layer": layer, "at": clock.iso(), "imported": len(fresh), "already": report.already}
        with contextlib.suppress(WriteFailed):  # the entries are in: a full disk only costs this note
            append_lines(imports_journal(layout), (json.dumps(record) + "\n").encode("ascii"),
                         torn_dir(layout.state_dir))
        journal.end(intent)
    report.imported = len(fresh)
    report.ids = [e.id for e in fresh]
    report.bad.sort(key=lambda b: b.number)
    return report


def imports_journal(layout: Layout):
    """One line per import run: the input's sha256, the layer, how many lines it added."""
    return layout.state_dir / "imports.jsonl"


def _parse_all(lines: list[bytes], default_type: str, known_types, extra_patterns: tuple[str, ...],
               source: str, layer: str, report: ImportReport, progress: Progress) -> list[tuple[int, Entry]]:
    stamp = clock.iso()
    parsed: list[tuple[int, Entry]] = []
    types = set(known_types) if known_types is not None else None
    repeats: Counter = Counter()
    progress(0, len(lines), "lines read")
    for number, raw in enumerate(lines, start=1):
        if number % PROGRESS_EVERY == 0:
            progress(number, len(lines), "lines read")
        if not raw.strip():
            continue
        try:
            entry = parse_line(raw, default_type, types, repeats)
        except ValueError as exc:
            report.bad.append(BadLine(number, str(exc)))
            continue
        entry.text = redact(entry.text, extra_patterns)
        entry.created = entry.updated = written_at(entry.date, stamp)
        entry.source = source
        if layer == "L6":
            entry.left_at, entry.reason = stamp, "imported"
        parsed.append((number, entry))
    progress(len(lines), len(lines), "lines read")
    return parsed


def written_at(date: str, stamp: str) -> str:
    """When an imported item was written: its own date when it can be read, names its year
    and is not after the import (the dream ages an entry from this: history is as old as it
    was said), else the import's time. A date without a year ("May 8", "session 3") would be
    read as one in 2000, and age the item by decades."""
    from memctl.recall.indexing.documents import normalize_date

    own = normalize_date(date)
    return own if own and own[:4] in date and own <= stamp else stamp


def _fresh(target, parsed: list[tuple[int, Entry]], layer: str, report: ImportReport,
           progress: Progress) -> list[Entry]:
    """The entries not in the target yet; a line already imported (same id, same text) is
    counted, another line with a taken id is a bad line."""
    taken: dict[str, str | None] = {}  # id -> its text in the target (None: not there), asked once an id
    fresh: list[Entry] = []
    progress(0, len(parsed), f"checked against {layer}")
    for done, (number, entry) in enumerate(parsed, start=1):
        if done % PROGRESS_EVERY == 0:
            progress(done, len(parsed), f"checked against {layer}")
        if entry.id not in taken:
            taken[entry.id] = _text_in(target, entry.id)
        if taken[entry.id] is not None:
            if taken[entry.id] == entry.text:
                report.already += 1
            else:
                report.bad.append(BadLine(number, f"id {entry.id!r} is already in {layer}"))
            continue
        taken[entry.id] = entry.text
        fresh.append(entry)
    progress(len(parsed), len(parsed), f"checked against {layer}")
    return fresh


def _text_in(target, entry_id: str) -> str | None:
    """The text the store holds for this id (L6: its last line), from its lookups."""
    try:
        row = target.row(entry_id)
    except UsageError:  # on more than one L5 line: taken, and not by this text
        return "\0"
    return row.entry.text if row is not None else None


def _input_digest(lines: list[bytes]) -> str:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line + b"\n")
    return digest.hexdigest()


def read_input(path: str) -> list[bytes]:
    """Lines of FILE, or of stdin for `-`."""
    import sys

    if path == "-":
        return sys.stdin.buffer.read().splitlines()
    try:
        return Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
