"""The derived search index: `.memctl/index.sqlite` (SQLite FTS5, ranked with bm25()).

Documents are cut from the layers (L2 sections, L3 files, L4 history lines and compressed
sessions loose or zipped, L5 and L6 entries), redacted, and tokenized by `memctl.recall.text`; FTS5
stores the pre-tokenized text and only splits it on spaces, so Chinese works.

Refresh is incremental: each source file is tracked by size and mtime; an append-only file
(histories, JSON Lines) whose old bytes are unchanged is read from where it stopped; a zip
re-indexes only members whose CRC changed. Everything here can be thrown away: a missing,
corrupt or outdated index is rebuilt into a temp file and renamed into place.

Session context: items that share a session (import's `session` field, history lines of one
session) are also concatenated into one session document, so ranking can favour an item whose
session as a whole matches the query.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sqlite3
from collections import Counter, namedtuple
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from memctl.core.config import Layout
from memctl.core.fsutil import FILE_MODE, NOFOLLOW, ensure_private_dir, set_mode, try_lock
from memctl.recall.text import Tokenizer, latin_tokens

TYPE_CHECKING = False  # typing and dataclasses cost ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Callable, Iterable, Iterator

# json, zipfile and hashlib are imported where they are used: a search that finds the index
# fresh needs none of them, and every millisecond of import is paid by every query.

SCHEMA_VERSION = "5"
SMALL_REFRESH_BYTES = 4_000_000  # up to this much new text, no jieba (see _refresh_tokenizer)
FTS_TOKENIZE = "unicode61 remove_diacritics 0 tokenchars '-_.'"
LAYER_MARK = "\ue000"  # a private-use char: FTS5 keeps it in a token, memctl's tokenizer never emits it
CHUNK_CHARS = 1500
SESSION_DOC_MAX_TOKENS = 20_000
TAIL_BYTES = 256
# every source kind but the tens of thousands of sessions (loose files, zip members): the
# few a search checks one by one when the session folder is unchanged
FEW_SOURCES_KINDS = "'l2', 'l3', 'hist', 'zip', 'l5', 'l6'"
L3_SUFFIXES = frozenset({".md", ".py", ".txt", ".sh", ".toml", ".yaml", ".yml", ".json", ".rst"})
L3_MAX_BYTES = 2_000_000
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


class RefreshReport:
    __slots__ = ("rebuilt", "sources_changed", "docs_added", "docs_removed", "bytes_read", "seconds", "errors")

    def __init__(self, rebuilt: bool = False, sources_changed: int = 0, docs_added: int = 0, docs_removed: int = 0,
                 bytes_read: int = 0, seconds: float = 0.0, errors: list[str] | None = None):
        self.rebuilt, self.sources_changed, self.docs_added = rebuilt, sources_changed, docs_added
        self.docs_removed, self.bytes_read, self.seconds = docs_removed, bytes_read, seconds
        self.errors = errors if errors is not None else []

    def summary(self) -> str:
        return (f"{'rebuilt' if self.rebuilt else 'refreshed'}: +{self.docs_added} -{self.docs_removed} "
                f"item(s) from {self.sources_changed} changed source(s) in {self.seconds:.2f}s")


class IndexOptions(namedtuple("IndexOptions", "redact_enabled extra_patterns include_l6",
                              defaults=(True, (), True))):
    """How documents are indexed (part of the index's signature: a change means a rebuild)."""

    __slots__ = ()
    redact_enabled: bool
    extra_patterns: tuple[str, ...]
    include_l6: bool

    @classmethod
    def from_settings(cls, settings) -> "IndexOptions":
        return cls(redact_enabled=bool(settings.get("redaction", "enabled")),
                   extra_patterns=tuple(settings.get("redaction", "extra_patterns")))


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
    """A compressed session: one item per piece of each Prompt/Response entry."""
    docs: list[Doc] = []
    date, kind, body = "", "", []
    entry_no = 0

    def flush() -> None:
        for first, piece in chunk_lines(body):
            if piece.strip():
                docs.append(Doc(ref=f"L4:{name}", layer="L4", text=piece, date=date, type=kind,
                                item_id=f"{name}#{entry_no}", session=name, in_context=False))

    for line in text.splitlines():
        marker = _SESSION_MARKER.match(line)
        if marker:
            flush()
            entry_no += 1
            kind = marker.group(1).lower()
            date, body = marker.group(2).replace(" ", "T"), []
        elif line.startswith("⟪memctl"):
            if line.startswith("⟪memctl:esc⟫"):
                body.append(line[len("⟪memctl:esc⟫"):])
        else:
            body.append(line)
    flush()
    return docs


def entry_doc(data: dict, layer: str) -> Doc | None:
    text = data.get("text")
    entry_id = data.get("id")
    if not isinstance(text, str) or not text.strip() or not entry_id:
        return None
    topic = data.get("topic") or ""
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
        except ValueError:
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


# ---------------------------------------------------------------- sources

class Source(namedtuple("Source", "key location kind size mtime_ns")):
    """key: stable name in the index (a path relative to the root, or zip!member); location:
    the file, as a str (building Path objects for every session costs ~0.5 s at 1 GB); kind:
    l2 l3 hist loose zip l5 l6 member."""

    __slots__ = ()

    @property
    def path(self) -> Path:
        return Path(self.location)


def scan_sources(layout: Layout, options: IndexOptions, include_l4_sessions: bool = True) -> list[Source]:
    root = layout.root
    found: list[Source] = []

    def add(path: Path, kind: str) -> None:
        with contextlib.suppress(OSError):
            info = os.stat(path, follow_symlinks=False)
            if os.path.isfile(path) and not os.path.islink(path):
                found.append(Source(os.path.relpath(path, root), str(path), kind, info.st_size, info.st_mtime_ns))

    add(layout.global_mem, "l2")
    add(layout.long_term, "l5")
    if options.include_l6:
        add(layout.cold_archive, "l6")
    add(layout.histories, "hist")
    if include_l4_sessions and layout.l4_dir.is_dir():
        found.extend(_l4_session_sources(layout))
    for path in _l3_files(layout):
        add(path, "l3")
    return found


_MONTH_ZIP = re.compile(r"\d{4}-\d\d\.zip")


def _l4_session_sources(layout: Layout) -> list[Source]:
    """Loose compressed sessions and monthly zips; tens of thousands of files at 1 GB, so this
    loop avoids pathlib and relpath and takes size and mtime from one stat per entry."""
    folder, history_name = layout.l4_dir, layout.histories.name
    prefix = os.path.relpath(folder, layout.root)
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            name = entry.name
            if name.endswith(".txt") and name != history_name and not name.startswith("."):
                kind = "loose"
            elif name.endswith(".zip") and _MONTH_ZIP.fullmatch(name):
                kind = "zip"
            else:
                continue
            try:
                if not entry.is_file(follow_symlinks=False):
                    continue
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            found.append(Source(f"{prefix}/{name}", entry.path, kind, info.st_size, info.st_mtime_ns))
    found.sort(key=lambda s: s.key)
    return found


def _l3_files(layout: Layout) -> Iterator[Path]:
    skip_dirs = {layout.l4_dir.name, layout.state_dir.name}
    skip_files = {layout.global_mem.name, layout.insight.name, layout.long_term.name, layout.cold_archive.name,
                  layout.dream_log.name, layout.config_file.name, layout.custom_dict.name, layout.aliases.name}
    for folder, dirs, files in os.walk(layout.root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (folder == str(layout.root) and d in skip_dirs))
        at_root = folder == str(layout.root)
        for name in sorted(files):
            if name.startswith(".") or (at_root and name in skip_files):
                continue
            path = Path(folder) / name
            if path.suffix in L3_SUFFIXES and (not at_root or path.suffix in (".md", ".py")):
                yield path


# ---------------------------------------------------------------- the SQLite store

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS sources(key TEXT PRIMARY KEY, kind TEXT, size INTEGER, mtime_ns INTEGER,
    tail TEXT, state TEXT);
CREATE TABLE IF NOT EXISTS items(rowid INTEGER PRIMARY KEY, source TEXT, ref TEXT, layer TEXT, date TEXT,
    type TEXT, item_id TEXT, session TEXT, ctx INTEGER, text TEXT);
CREATE INDEX IF NOT EXISTS items_source ON items(source);
CREATE INDEX IF NOT EXISTS sources_kind ON sources(kind);
CREATE INDEX IF NOT EXISTS items_session ON items(session) WHERE ctx = 1;
CREATE INDEX IF NOT EXISTS items_item_id ON items(item_id) WHERE item_id != '';
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(body, tokenize="{FTS_TOKENIZE}");
CREATE TABLE IF NOT EXISTS sessions(rowid INTEGER PRIMARY KEY, key TEXT UNIQUE);
CREATE VIRTUAL TABLE IF NOT EXISTS sfts USING fts5(body, tokenize="{FTS_TOKENIZE}");
CREATE TABLE IF NOT EXISTS vocab(term TEXT PRIMARY KEY, df INTEGER) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS surface(word TEXT PRIMARY KEY, term TEXT) WITHOUT ROWID;
"""


def connect(path: Path, timeout: float = 5.0) -> sqlite3.Connection:
    db = sqlite3.connect(str(path), timeout=timeout, isolation_level=None)
    db.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
    return db


def meta_get(db: sqlite3.Connection, key: str, default: str = "") -> str:
    row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return row[0] if row else default


def meta_set(db: sqlite3.Connection, key: str, value: str) -> None:
    db.execute("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
               (key, value))


def layer_token(layer: str) -> str:
    return f"{LAYER_MARK}{layer.lower()}"


def _file_signature(path: Path) -> str:
    try:
        info = os.stat(path)
    except OSError:
        return "absent"
    return f"{info.st_size}:{info.st_mtime_ns}"


class IndexWriter:
    """Adds and removes documents, keeping the vocabulary and session documents in step."""

    def __init__(self, db: sqlite3.Connection, tokenizer: Tokenizer, options: IndexOptions):
        self.db = db
        self.tokenizer = tokenizer
        self.options = options
        self.df_delta: Counter[str] = Counter()
        self.dirty_sessions: set[str] = set()
        self.added = 0
        self.removed = 0
        self.next_rowid: int | None = None
        self.layers: set[str] = set()

    def add(self, source_key: str, docs: Iterable[Doc]) -> None:
        from memctl.core.redact import redact  # here, not at the top: a search never needs its patterns

        if self.next_rowid is None:
            self.next_rowid = (self.db.execute("SELECT max(rowid) FROM items").fetchone()[0] or 0) + 1
        item_rows, fts_rows = [], []
        for doc in docs:
            text = redact(doc.text, self.options.extra_patterns) if self.options.redact_enabled else doc.text
            terms = self.tokenizer.tokens(text)
            self.df_delta.update(set(terms))
            rowid = self.next_rowid
            self.next_rowid += 1
            item_rows.append((rowid, source_key, doc.ref, doc.layer, doc.date, doc.type, doc.item_id, doc.session,
                              int(doc.in_context), text))
            fts_rows.append((rowid, f"{layer_token(doc.layer)} {' '.join(terms)}"))
            if doc.session and doc.in_context:
                self.dirty_sessions.add(doc.session)
            self.layers.add(doc.layer)
            self.added += 1
            if len(fts_rows) >= 2000:
                self._insert(item_rows, fts_rows)
        self._insert(item_rows, fts_rows)

    def _insert(self, item_rows: list, fts_rows: list) -> None:
        self.db.executemany("INSERT INTO items(rowid, source, ref, layer, date, type, item_id, session, ctx, text) "
                            "VALUES(?,?,?,?,?,?,?,?,?,?)", item_rows)
        self.db.executemany("INSERT INTO fts(rowid, body) VALUES(?, ?)", fts_rows)
        item_rows.clear()
        fts_rows.clear()

    def remove_source(self, source_key: str) -> None:
        rows = self.db.execute("SELECT rowid, session, ctx FROM items WHERE source=?", (source_key,)).fetchall()
        if not rows:
            return
        for rowid, session, ctx in rows:
            body = self.db.execute("SELECT body FROM fts WHERE rowid=?", (rowid,)).fetchone()
            if body:
                self.df_delta.subtract(set(body[0].split()[1:]))
            if session and ctx:
                self.dirty_sessions.add(session)
        self.db.executemany("DELETE FROM fts WHERE rowid=?", ((r[0],) for r in rows))
        self.db.execute("DELETE FROM items WHERE source=?", (source_key,))
        self.removed += len(rows)

    def finish(self) -> None:
        self._flush_vocab()
        self._flush_surface_words()
        self._rebuild_session_docs()

    def _flush_vocab(self) -> None:
        rows = [(term, delta) for term, delta in self.df_delta.items() if delta and not term.startswith(LAYER_MARK)]
        self.db.executemany(
            "INSERT INTO vocab(term, df) VALUES(?, ?) ON CONFLICT(term) DO UPDATE SET df = df + excluded.df", rows)
        # only terms that lost documents can have dropped to zero (a full scan costs seconds at 1 GB)
        self.db.executemany("DELETE FROM vocab WHERE term = ? AND df <= 0", ((t,) for t, d in rows if d < 0))
        self.df_delta.clear()

    def _flush_surface_words(self) -> None:
        words = {w.lower() for w in self.tokenizer.words if len(w) >= 4 and w.isalpha()}
        rows = [(w, terms[0]) for w in words for terms in (latin_tokens(w),) if terms]
        self.db.executemany("INSERT OR IGNORE INTO surface(word, term) VALUES(?, ?)", rows)
        words.clear()

    def _rebuild_session_docs(self) -> None:
        for session in sorted(self.dirty_sessions):
            row = self.db.execute("SELECT rowid FROM sessions WHERE key=?", (session,)).fetchone()
            if row:
                self.db.execute("DELETE FROM sfts WHERE rowid=?", (row[0],))
            bodies = self.db.execute(
                "SELECT fts.body FROM items JOIN fts ON fts.rowid = items.rowid WHERE items.session=? AND items.ctx=1",
                (session,)).fetchall()
            terms: list[str] = []
            for (body,) in bodies:
                terms.extend(body.split()[1:])
                if len(terms) > SESSION_DOC_MAX_TOKENS:
                    break
            if not terms:
                if row:
                    self.db.execute("DELETE FROM sessions WHERE rowid=?", (row[0],))
                continue
            if row:
                rowid = row[0]
            else:
                rowid = self.db.execute("INSERT INTO sessions(key) VALUES(?)", (session,)).lastrowid
            self.db.execute("INSERT INTO sfts(rowid, body) VALUES(?, ?)", (rowid, " ".join(terms)))
        self.dirty_sessions.clear()


# ---------------------------------------------------------------- the index's own dictionary

MAX_WORD_CHARS = 8


class VocabSegmenter:
    """Cut a CJK run into the words the index holds, jieba-style (best route + sub-words).

    The query side always uses it (no jieba at search time); a small incremental refresh uses it
    too, so a new session does not pay jieba's dictionary load. `index rebuild` uses jieba."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        total = meta_get(db, "items", "0")
        self.log_total = math.log(max(int(total or 0), 1) + 1)

    def __call__(self, run: str) -> list[str]:
        run = run[:200]
        known = self._known_substrings(run)
        words = self._best_route(run, known)
        out = []
        for word in words:
            if len(word) > 2:
                out.extend(word[i:i + 2] for i in range(len(word) - 1) if word[i:i + 2] in known)
            if len(word) > 3:
                out.extend(word[i:i + 3] for i in range(len(word) - 2) if word[i:i + 3] in known)
            out.append(word)
        return out

    def _known_substrings(self, run: str) -> dict[str, int]:
        candidates = sorted({run[i:j] for i in range(len(run)) for j in range(i + 1, min(len(run), i + MAX_WORD_CHARS) + 1)})
        found: dict[str, int] = {}
        for start in range(0, len(candidates), 500):
            part = candidates[start:start + 500]
            marks = ",".join("?" * len(part))
            found.update(self.db.execute(f"SELECT term, df FROM vocab WHERE term IN ({marks})", part).fetchall())
        return found

    def _best_route(self, run: str, known: dict[str, int]) -> list[str]:
        n = len(run)
        best: list[tuple[float, int]] = [(0.0, n)] * (n + 1)
        for i in range(n - 1, -1, -1):
            options = []
            for j in range(i + 1, min(n, i + MAX_WORD_CHARS) + 1):
                word = run[i:j]
                if word in known or j == i + 1:
                    weight = math.log(known.get(word, 0) + 1) - self.log_total - (0 if word in known else 5)
                    options.append((weight + best[j][0], j))
            best[i] = max(options)
        words, i = [], 0
        while i < n:
            j = best[i][1]
            words.append(run[i:j])
            i = j
        return words


# ---------------------------------------------------------------- refresh

class SearchIndex:
    """Open, refresh and rebuild the index of one memory root."""

    def __init__(self, layout: Layout, options: IndexOptions | None = None,
                 tokenizer_factory: Callable[[Path], Tokenizer] = Tokenizer.for_root):
        self.layout = layout
        self.options = options or IndexOptions()
        self.tokenizer_factory = tokenizer_factory
        self._tokenizer: Tokenizer | None = None
        # one refresh's reads, shared by its steps and reset at its start
        self._known_rows: dict[str, tuple] | None = None
        self._last_scan: list[Source] | None = None
        self._last_scan_signature = ""

    @property
    def path(self) -> Path:
        return self.layout.index

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = self.tokenizer_factory(self.layout.custom_dict)
            self._tokenizer.collect_words = True
        return self._tokenizer

    def _config_signature(self) -> str:
        return f"{SCHEMA_VERSION}|{_file_signature(self.layout.custom_dict)}|{self.options.redact_enabled}|" \
               f"{'|'.join(self.options.extra_patterns)}|{self.options.include_l6}"

    @contextlib.contextmanager
    def _index_lock(self, wait: bool) -> Iterator[bool]:
        """The index's own lock: one refresher at a time; searches never wait for a refresher."""
        ensure_private_dir(self.path.parent)
        fd = os.open(self.path.parent / "index.lock", os.O_RDWR | os.O_CREAT | NOFOLLOW, FILE_MODE)
        try:
            yield try_lock(fd, wait)
        finally:
            os.close(fd)

    def is_usable(self) -> bool:
        if not self.path.exists():
            return False
        try:
            db = connect(self.path, timeout=2.0)
            try:
                return meta_get(db, "config") == self._config_signature()
            finally:
                db.close()
        except sqlite3.DatabaseError:
            return False

    def ensure_fresh(self, wait: bool = False) -> RefreshReport:
        """Refresh before a search. If another process is refreshing, use the index as it is."""
        report = RefreshReport()
        usable = self.is_usable()
        with self._index_lock(wait=wait or not usable) as got:
            if not got:
                return report
            if not self.is_usable():
                return self._rebuild_locked()
            try:
                return self._refresh_locked()
            except sqlite3.DatabaseError:
                return self._rebuild_locked()

    def rebuild(self) -> RefreshReport:
        with self._index_lock(wait=True):
            return self._rebuild_locked()

    def _rebuild_locked(self) -> RefreshReport:
        import time

        started = time.monotonic()
        ensure_private_dir(self.path.parent)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        db = connect(tmp)
        try:
            db.execute("PRAGMA journal_mode=OFF")
            db.execute("PRAGMA synchronous=OFF")
            db.executescript(_SCHEMA)
            self._known_rows = None
            report = self._update(db, rebuilt=True)
            meta_set(db, "config", self._config_signature())
            db.execute("PRAGMA optimize")
        except BaseException:
            db.close()
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise
        db.close()
        set_mode(tmp, FILE_MODE)
        for leftover in (self.path.with_name(self.path.name + "-journal"), self.path.with_name(self.path.name + "-wal")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
        os.replace(tmp, self.path)
        report.rebuilt = True
        report.seconds = time.monotonic() - started
        return report

    def _refresh_locked(self) -> RefreshReport:
        import time

        started = time.monotonic()
        db = connect(self.path)
        try:
            self._last_scan = None
            self._known_rows = None
            changed = self._changed_sources(db)
            if not changed:
                return RefreshReport(seconds=time.monotonic() - started)
            if self._last_scan is not None:
                l4_signature, current = self._last_scan_signature, self._last_scan
            else:
                l4_signature = _file_signature(self.layout.l4_dir)  # before the scan: a later change shows next time
                current = scan_sources(self.layout, self.options)
            tokenizer = self._refresh_tokenizer(db, current)
            db.execute("BEGIN IMMEDIATE")
            try:
                report = self._update(db, rebuilt=False, tokenizer=tokenizer, current=(l4_signature, current))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        finally:
            db.close()
        report.seconds = time.monotonic() - started
        return report

    def _refresh_tokenizer(self, db: sqlite3.Connection, current: list[Source]) -> Tokenizer:
        """A few new megabytes are cut against the index's own vocabulary (built by jieba), so a
        refresh after one new session takes well under a second instead of loading jieba."""
        if self._pending_bytes(db, current) > SMALL_REFRESH_BYTES or not db.execute("SELECT 1 FROM vocab LIMIT 1").fetchone():
            return self.tokenizer
        return Tokenizer(VocabSegmenter(db), collect_words=True)

    def _pending_bytes(self, db: sqlite3.Connection, current: list[Source]) -> int:
        known = self._sources_table(db)
        pending = 0
        for source in current:
            old = known.get(source.key)
            if old is None or old[2] > source.size:
                pending += source.size
            elif (old[2], old[3]) != (source.size, source.mtime_ns):
                pending += source.size - old[2] if source.kind in ("hist", "l5", "l6") else source.size
        return pending

    def _sources_table(self, db: sqlite3.Connection) -> dict[str, tuple]:
        """key -> (key, kind, size, mtime_ns, tail, state), read once per refresh (15,000 rows at
        1 GB: reading them three times was a fifth of a refresh)."""
        if self._known_rows is None:
            self._known_rows = {row[0]: row for row in
                                db.execute("SELECT key, kind, size, mtime_ns, tail, state FROM sources")}
        return self._known_rows

    def _changed_sources(self, db: sqlite3.Connection) -> bool:
        if meta_get(db, "l4_dir") == _file_signature(self.layout.l4_dir):
            # Compressed sessions are only ever created, renamed or deleted, never changed in
            # place, and any of that changes the folder's mtime: no need to stat (or even load)
            # each of them. Monthly zips are few; they are checked one by one.
            quick = [(key, (kind, size, mtime)) for key, kind, size, mtime in db.execute(
                f"SELECT key, kind, size, mtime_ns FROM sources WHERE kind IN ({FEW_SOURCES_KINDS})")]
            for key, (kind, size, mtime) in quick:
                try:
                    info = os.stat(self.layout.root / key, follow_symlinks=False)
                except OSError:
                    return True
                if (info.st_size, info.st_mtime_ns) != (size, mtime):
                    return True
            return self._l3_or_top_files_changed({key for key, v in quick if v[0] != "zip"})
        known = self._sources_table(db)
        self._last_scan_signature = _file_signature(self.layout.l4_dir)
        current = scan_sources(self.layout, self.options)
        self._last_scan = current
        if len(current) != sum(1 for row in known.values() if row[1] != "member"):
            return True
        return any(known.get(s.key, (None,) * 4)[2:4] != (s.size, s.mtime_ns) for s in current)

    def _l3_or_top_files_changed(self, known_keys: set[str]) -> bool:
        current = {s.key for s in scan_sources(self.layout, self.options, include_l4_sessions=False)}
        return current != known_keys

    def _update(self, db: sqlite3.Connection, rebuilt: bool, tokenizer: Tokenizer | None = None,
                current: tuple[str, list[Source]] | None = None) -> RefreshReport:
        import zipfile

        # an index built before this index existed gets it at its next change (15,000 rows: ms)
        db.execute("CREATE INDEX IF NOT EXISTS sources_kind ON sources(kind)")
        report = RefreshReport(rebuilt=rebuilt)
        if current is None:
            l4_signature = _file_signature(self.layout.l4_dir)  # before the scan: a later change shows next time
            sources = scan_sources(self.layout, self.options)
        else:
            l4_signature, sources = current
        writer = IndexWriter(db, tokenizer or self.tokenizer, self.options)
        known = self._sources_table(db)
        current_keys = {s.key for s in sources}
        for key, row in known.items():
            if row[1] != "member" and key not in current_keys:
                self._forget_source(db, writer, key, row[1])
                report.sources_changed += 1
        dates = None
        for source in sources:
            row = known.get(source.key)
            if row and (row[2], row[3]) == (source.size, source.mtime_ns):
                continue
            report.sources_changed += 1
            if source.kind == "hist" and dates is None:
                dates = manifest_dates(self.layout)
            try:
                report.bytes_read += self._index_source(db, writer, source, row, dates or {})
            except (OSError, zipfile.BadZipFile, UnicodeError) as exc:
                report.errors.append(f"{source.key}: {exc}")
        writer.finish()
        count = int(meta_get(db, "items", "0") or 0) + writer.added - writer.removed
        meta_set(db, "items", str(count))
        meta_set(db, "l4_dir", l4_signature)
        known_layers = set(filter(None, meta_get(db, "layers").split(",")))
        meta_set(db, "layers", ",".join(sorted(known_layers | writer.layers)))
        report.docs_added, report.docs_removed = writer.added, writer.removed
        return report

    def _forget_source(self, db, writer: IndexWriter, key: str, kind: str) -> None:
        if kind == "zip":
            for (member_key,) in db.execute("SELECT key FROM sources WHERE key LIKE ? AND kind='member'",
                                            (f"{key}!%",)).fetchall():
                writer.remove_source(member_key)
                db.execute("DELETE FROM sources WHERE key=?", (member_key,))
        writer.remove_source(key)
        db.execute("DELETE FROM sources WHERE key=?", (key,))

    def _record(self, db, source: Source, tail: str, state: str) -> None:
        db.execute("INSERT INTO sources(key, kind, size, mtime_ns, tail, state) VALUES(?,?,?,?,?,?) "
                   "ON CONFLICT(key) DO UPDATE SET kind=excluded.kind, size=excluded.size, "
                   "mtime_ns=excluded.mtime_ns, tail=excluded.tail, state=excluded.state",
                   (source.key, source.kind, source.size, source.mtime_ns, tail, state))

    def _index_source(self, db, writer: IndexWriter, source: Source, row, dates: dict[str, str]) -> int:
        if source.kind == "zip":
            return self._index_zip(db, writer, source)
        if source.kind in ("hist", "l5", "l6"):
            return self._index_appendable(db, writer, source, row, dates)
        data = _read_file(source.path)
        writer.remove_source(source.key)
        text = data.decode("utf-8", "replace")
        if source.kind == "l2":
            docs = l2_docs(text)
        elif source.kind == "loose":
            docs = session_docs(source.path.stem, text)
        else:
            docs = l3_docs(source.key, text) if len(data) <= L3_MAX_BYTES else []
        writer.add(source.key, docs)
        self._record(db, source, "", "")
        return len(data)

    def _index_appendable(self, db, writer: IndexWriter, source: Source, row, dates: dict[str, str]) -> int:
        """Read only what was appended when the bytes indexed before are still there."""
        import json

        old_size = row[2] if row else 0
        old_tail = row[4] if row else ""
        state = json.loads(row[5]) if row and row[5] else {}
        with open(source.path, "rb") as handle:
            start = 0
            if row and 0 < old_size <= source.size and _tail_hash(handle, old_size) == old_tail:
                start = old_size
            else:
                writer.remove_source(source.key)
                state = {}
            handle.seek(start)
            data = handle.read()
        end = start + len(data)
        cut = data.rfind(b"\n") + 1  # a partly written last line waits for the next refresh
        data, end = data[:cut], start + cut
        if source.kind == "hist":
            first_line = int(state.get("line", 1))
            docs, session = history_docs(data.decode("utf-8", "replace"), first_line, state.get("session", ""), dates)
            state = {"line": first_line + data.count(b"\n"), "session": session}
        else:
            docs = jsonl_docs(data, "L5" if source.kind == "l5" else "L6")
        writer.add(source.key, docs)
        with open(source.path, "rb") as handle:
            tail = _tail_hash(handle, end)
        recorded = Source(source.key, source.location, source.kind, end, source.mtime_ns if end == source.size else -1)
        self._record(db, recorded, tail, json.dumps(state))
        return len(data)

    def _index_zip(self, db, writer: IndexWriter, source: Source) -> int:
        import zipfile

        read = 0
        known = {key: tail for key, tail in db.execute(
            "SELECT key, tail FROM sources WHERE key LIKE ? AND kind='member'", (f"{source.key}!%",))}
        with zipfile.ZipFile(source.path) as archive:
            members = {f"{source.key}!{info.filename}": info for info in archive.infolist()
                       if info.filename.endswith(".txt") and not info.is_dir()}
            for key in set(known) - set(members):
                writer.remove_source(key)
                db.execute("DELETE FROM sources WHERE key=?", (key,))
            for key, info in members.items():
                signature = f"{info.CRC}:{info.file_size}"
                if known.get(key) == signature:
                    continue
                writer.remove_source(key)
                data = archive.read(info)
                read += len(data)
                name = Path(info.filename).stem
                writer.add(key, session_docs(name, data.decode("utf-8", "replace")))
                self._record(db, Source(key, source.location, "member", info.file_size, 0), signature, "")
        self._record(db, source, "", "")
        return read


def _read_file(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def _tail_hash(handle, end: int) -> str:
    import hashlib

    start = max(0, end - TAIL_BYTES)
    handle.seek(start)
    return hashlib.sha1(handle.read(end - start)).hexdigest()
