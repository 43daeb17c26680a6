"""What each layer contributes to the search index: the documents cut from L2 sections, L3
files, L4 history lines and compressed sessions, L5 and L6 entries, and the dates they carry.

Pure functions of a layer's text: no SQLite here (the writer stores what they return).
`IndexOptions` says how documents are indexed (part of the index's signature).
"""

from __future__ import annotations

import contextlib
import re
from collections import namedtuple
from datetime import datetime
from functools import lru_cache

from memctl.core.config import Layout

TYPE_CHECKING = False  # typing and dataclasses cost ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Iterator

CHUNK_CHARS = 1500
_SESSION_MARKER = re.compile(r"^=== (Prompt|Response) === (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
_SECTION = re.compile(r"^##\s*\[(?P<name>[^\]]+)\]")
_HISTORY_RULE = "=" * 60
_CN_DATE = re.compile(r"(\d{4})年(\d{1,2})月(\d{1,2})日(?:\D*?(\d{1,2}):(\d{2}))?")


class Doc:
    """One searchable item cut from a layer."""

    __slots__ = ("ref", "layer", "text", "date", "type", "item_id", "session", "in_context")

    def __init__(self, ref: str, layer: str, text: str, date: str = "", type: str = "", item_id: str = "",
                 session: str = "", in_context: bool = True):
        self.ref, self.layer, self.text, self.date = ref, layer, text, date
        self.type, self.item_id, self.session = type, item_id, session
        self.in_context = in_context  # part of its session's context document

    def __repr__(self) -> str:
        return f"Doc({self.ref!r}, {self.layer!r}, {self.text[:40]!r}…)"



class IndexOptions(namedtuple("IndexOptions", "redact_enabled extra_patterns include_l6 max_member_bytes "
                                             "backend memory raw_dir",
                              defaults=(True, (), True, 64 * 1024 * 1024, "files", "default", ""))):
    """How documents are indexed (part of the index's signature: a change means a rebuild),
    and where the index lives (`[store]`: "files" is .memctl/index.sqlite, "postgres" the
    memory's schema on the server: memctl.recall.indexing.pg_store)."""

    __slots__ = ()
    redact_enabled: bool
    extra_patterns: tuple[str, ...]
    include_l6: bool
    max_member_bytes: int  # a zip member past it is indexed up to it (verify reports it)
    backend: str
    memory: str
    raw_dir: str  # the raw logs not archived yet, searched where they lie ('' : none)

    @classmethod
    def from_settings(cls, settings) -> "IndexOptions":
        return cls(redact_enabled=bool(settings.get("redaction", "enabled")),
                   extra_patterns=tuple(settings.get("redaction", "extra_patterns")),
                   max_member_bytes=int(settings.get("index", "max_member_bytes")),
                   backend=str(settings.get("store", "backend")), memory=str(settings.get("store", "memory")),
                   raw_dir=str(settings.raw_dir()) if settings.get("store", "backend") == "files" else "")


# ---------------------------------------------------------------- dates

@lru_cache(maxsize=50_000)
def normalize_date(text: str) -> str:
    """Any date the layers carry -> ISO `YYYY-MM-DDTHH:MM:SS`, or '' if it cannot be read."""
    text = (text or "").strip()
    if not text:
        return ""
    try:
        return _iso(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        pass
    cn = _CN_DATE.search(text)
    if cn:
        year, month, day, hour, minute = cn.groups()
        return _iso(datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0)))
    try:
        from dateutil import parser as date_parser

        return _iso(date_parser.parse(text, fuzzy=True, default=datetime(2000, 1, 1)))
    except (ValueError, OverflowError, TypeError):
        return ""


def _iso(value: datetime) -> str:
    if value.tzinfo is not None:
        value = value.astimezone().replace(tzinfo=None)
    return value.isoformat(timespec="seconds")


# ---------------------------------------------------------------- documents from each layer

def l2_docs(text: str) -> list[Doc]:
    docs, name, lines = [], "", []

    def flush() -> None:
        body = "\n".join(lines).strip()
        if body:
            docs.append(Doc(ref=f"L2:{name or 'global_mem.txt'}", layer="L2", text=f"## [{name}]\n{body}" if name else body))

    for line in text.splitlines():
        match = _SECTION.match(line)
        if match:
            flush()
            name, lines = match.group("name").strip(), []
        else:
            lines.append(line)
    flush()
    return docs


def chunk_lines(lines: list[str], limit: int = CHUNK_CHARS) -> Iterator[tuple[int, str]]:
    """(first line number, text) pieces of at most ~limit characters, cut at line ends."""
    start, size, piece = 0, 0, []
    for number, line in enumerate(lines):
        if piece and size + len(line) > limit:
            yield start, "\n".join(piece)
            start, size, piece = number, 0, []
        piece.append(line[: limit * 4])
        size += len(line) + 1
    if piece:
        yield start, "\n".join(piece)


def l3_docs(relpath: str, text: str) -> list[Doc]:
    layer_type = "task" if relpath.startswith("working/") else ""
    lines = text.splitlines()
    docs = []
    for first, piece in chunk_lines(lines):
        if piece.strip():
            ref = f"L3:{relpath}" if first == 0 else f"L3:{relpath}:{first + 1}"
            docs.append(Doc(ref=ref, layer="L3", text=piece, type=layer_type))
    return docs


def session_docs(name: str, text: str) -> list[Doc]:
    """A compressed session: one item per piece of each Prompt/Response entry, its id NAME#N."""
    docs: list[Doc] = []
    for entry_no, kind, date, body in session_entries(text):
        for first, piece in chunk_lines(body):
            if piece.strip():
                docs.append(Doc(ref=f"L4:{name}", layer="L4", text=piece, date=date, type=kind,
                                item_id=f"{name}#{entry_no}", session=name, in_context=False))
    return docs


def session_entries(text: str):
    """(number, kind, date, body lines) of each Prompt/Response entry of a compressed session;
    number 0 is what precedes the first entry (memctl's own marker lines dropped)."""
    entry_no, kind, date, body = 0, "", "", []
    for line in text.splitlines():
        marker = _SESSION_MARKER.match(line)
        if marker:
            yield entry_no, kind, date, body
            entry_no += 1
            kind = marker.group(1).lower()
            date, body = marker.group(2).replace(" ", "T"), []
        elif line.startswith("⟪memctl"):
            if line.startswith("⟪memctl:esc⟫"):
                body.append(line[len("⟪memctl:esc⟫"):])
        else:
            body.append(line)
    yield entry_no, kind, date, body


def entry_doc(data: dict, layer: str) -> Doc | None:
    text = data.get("text")
    entry_id = data.get("id")
    topic = data.get("topic") or ""
    if not isinstance(text, str) or not text.strip() or not entry_id or not isinstance(topic, str):
        return None  # not an entry (`topic: 3`): the entry store skips the line too, and `verify` names it
    date = normalize_date(str(data.get("date") or data.get("created") or data.get("updated") or ""))
    shown = f"{text}" if not topic or topic in text else f"{topic}: {text}"
    return Doc(ref=f"{layer}:{entry_id}", layer=layer, text=shown, date=date, type=str(data.get("type") or ""),
               item_id=str(entry_id), session=str(data.get("session") or ""))


def jsonl_docs(chunk: bytes, layer: str) -> list[Doc]:
    import json

    docs = []
    for raw in chunk.splitlines():
        raw = raw.strip()
        if not raw:
            continue
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: a line nested thousands deep
            continue
        doc = entry_doc(data, layer) if isinstance(data, dict) else None
        if doc:
            docs.append(doc)
    return docs


def history_docs(chunk: str, first_line: int, session: str, dates: dict[str, str]) -> tuple[list[Doc], str]:
    """Lines of all_histories.txt from line `first_line` (1-based); returns docs and the open session."""
    docs = []
    for offset, line in enumerate(chunk.splitlines()):
        stripped = line.strip()
        if not stripped or stripped == _HISTORY_RULE:
            continue
        if stripped.startswith("SESSION:"):
            session = stripped[len("SESSION:"):].strip()
            continue
        docs.append(Doc(ref=f"L4:{session}#h{first_line + offset}", layer="L4", text=stripped,
                        date=dates.get(session, ""), type="history", session=session))
    return docs, session


def manifest_dates(layout: Layout) -> dict[str, str]:
    import json

    dates: dict[str, str] = {}
    with contextlib.suppress(OSError):
        with open(layout.manifest, "rb") as handle:
            for raw in handle:
                with contextlib.suppress(ValueError, AttributeError):
                    record = json.loads(raw)
                    dates[record["name"]] = normalize_date(str(record.get("start") or ""))
    return dates
