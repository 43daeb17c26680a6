"""The SQLite file of the derived index: its schema, connections, the meta table, and
`SQLiteStore`, the one interface through which everything else reads and writes it."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from memctl.core.fsutil import refuse_symlink
from memctl.recall.indexing.scoring import fts_totals
from memctl.recall.indexing.writer import FTS_TOKENIZE, IndexWriter, layer_token

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Iterator, Sequence

    from memctl.recall.indexing.documents import IndexOptions
    from memctl.recall.indexing.text import Tokenizer

SCHEMA_VERSION = "5"

SCHEMA = f"""
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
    refuse_symlink(  # SQLite follows links: its files are checked first
        *(Path(f"{path}{suffix}") for suffix in ("", "-journal", "-wal", "-shm")))
    db = sqlite3.connect(str(path), timeout=timeout, isolation_level=None)
    db.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
    return db


def meta_get(db: sqlite3.Connection, key: str, default: str = "") -> str:
    row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return row[0] if row else default


def meta_set(db: sqlite3.Connection, key: str, value: str) -> None:
    db.execute("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
               (key, value))


class SQLiteStore:
    """The derived index's one interface: every read and write of it by the ranking
    (memctl.recall.search and its stage modules), the refresh (memctl.recall.indexing.refresh) and
    SearchIndex goes through these methods, so a second backend is one more class with the
    same method set, and neither the commands nor the ranking nor the refresh change.

    The interface, named after what each method returns:
      opening: open (checked), at, create, close, transaction, search_scope (one search's
        lookups: a server's store answers the repeated ones from what it fetched);
      ranking: item_count, present_layers, document_frequencies, surface_words_from,
        surface_words_containing,
        ranked_item_scores, matching_item_ids, newest_matching_item_ids, item_rows, item_texts,
        item_bodies, item_totals, context_item_ids_near(_each), session_document_count, session_keys,
        best_session_scores, session_bodies, session_totals;
      embedding (memctl.recall.embeddings.semantic): last_item_id, item_texts_between, item_turns_between,
        item_turns (a fused search's check that a vector's texts are the rows' still);
      refresh: meta, set_meta, has_vocabulary, tracked_sources, sources_of_kinds,
        member_signatures, record_source, drop_source, upgrade_schema, optimize, writer (adds
        and removes documents: memctl.recall.indexing.writer, this backend's own).

    Query terms and layers are passed as lists; how they become a match expression (FTS5's
    syntax, the layer token in each body) is this backend's business.
    """

    BATCH = 900  # bound variables per statement (SQLite's default limit is 999)

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        self._item_count: int | None = None
        self._layers: tuple[str, ...] | None = None
        self._totals: dict[str, tuple[int, int]] = {}  # FTS5 table -> (rows, terms), for bm25 in Python
        self._new = False  # made by `create` and not written yet: its first writer fills an empty index

    @classmethod
    def open(cls, path: Path) -> SQLiteStore:
        """The index at `path`, checked readable (sqlite3.DatabaseError when it is not an index)."""
        db = connect(path)
        try:
            db.execute("SELECT count(*) FROM meta").fetchone()
        except sqlite3.DatabaseError:
            db.close()
            raise
        return cls(db)

    @classmethod
    def at(cls, path: Path, timeout: float = 5.0) -> SQLiteStore:
        """The index at `path`, unchecked (a refresh finds out, and rebuilds)."""
        return cls(connect(path, timeout=timeout))

    # FTS5 keeps a transaction's new terms in memory up to this much before it writes them as a
    # segment (default 1 MB): fewer, bigger segments, fewer merges while a build inserts (the
    # 8 MB Latin sample's inserts: 0.25 -> 0.19 cpu-s; bench/RESULTS.md); kept by the index
    # for its refreshes
    FTS_HASHSIZE = 8 * 1024 * 1024

    @classmethod
    def create(cls, path: Path) -> SQLiteStore:
        """A new, empty index at `path`, written without a journal (a rebuild renames it into
        place when it is complete, so a crash leaves only a temp file)."""
        db = connect(path)
        try:
            db.execute("PRAGMA journal_mode=OFF")
            db.execute("PRAGMA synchronous=OFF")
            db.executescript(SCHEMA)
            for table in ("fts", "sfts"):
                db.execute(f"INSERT INTO {table}({table}, rank) VALUES('hashsize', {cls.FTS_HASHSIZE})")
        except BaseException:
            db.close()
            raise
        store = cls(db)
        store._new = True
        return store

    def close(self) -> None:
        self.db.close()

    def search_scope(self) -> contextlib.nullcontext:
        """One search's lookups (a server's store answers its repeated ones from one statement
        each; here every lookup is a cheap local query)."""
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """All the writes inside, or none of them."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    # -- refresh: what the index holds of each source

    def meta(self, key: str, default: str = "") -> str:
        """The index's record `key` (config, items, layers, l4_dir), or `default`."""
        return meta_get(self.db, key, default)

    def set_meta(self, key: str, value: str) -> None:
        meta_set(self.db, key, value)

    def has_vocabulary(self) -> bool:
        """Whether the index holds any term's document frequency."""
        return self.db.execute("SELECT 1 FROM vocab LIMIT 1").fetchone() is not None

    def tracked_sources(self) -> dict[str, tuple]:
        """key -> (key, kind, size, mtime_ns, tail, state) of every source indexed."""
        return {row[0]: row for row in self.db.execute("SELECT key, kind, size, mtime_ns, tail, state FROM sources")}

    def sources_of_kinds(self, kinds: Sequence[str]) -> list[tuple[str, str, int, int]]:
        """(key, kind, size, mtime_ns) of the sources of the given kinds."""
        marks = ",".join("?" * len(kinds))
        return self.db.execute(f"SELECT key, kind, size, mtime_ns FROM sources WHERE kind IN ({marks})",
                               list(kinds)).fetchall()

    def member_signatures(self, zip_key: str) -> dict[str, str]:
        """key -> signature (CRC:size) of the zip members indexed from the zip `zip_key`."""
        return dict(self.db.execute("SELECT key, tail FROM sources WHERE key LIKE ? AND kind='member'",
                                    (f"{zip_key}!%",)).fetchall())

    def record_source(self, key: str, kind: str, size: int, mtime_ns: int, tail: str, state: str) -> None:
        """What the index now holds of a source: its size and mtime, a hash of its last bytes
        (or a member's signature) and the reader's state (JSON)."""
        self.db.execute("INSERT INTO sources(key, kind, size, mtime_ns, tail, state) VALUES(?,?,?,?,?,?) "
                        "ON CONFLICT(key) DO UPDATE SET kind=excluded.kind, size=excluded.size, "
                        "mtime_ns=excluded.mtime_ns, tail=excluded.tail, state=excluded.state",
                        (key, kind, size, mtime_ns, tail, state))

    def drop_source(self, key: str) -> None:
        """Forget a source's record (its documents are removed by the writer)."""
        self.db.execute("DELETE FROM sources WHERE key=?", (key,))

    def row_sources(self, include_l6: bool) -> None:
        """None: L5 and L6 are the memory's files here (a server may hold them as rows)."""
        return None

    def upgrade_schema(self) -> None:
        """Add what an index built by an older memctl lacks (15,000 rows: milliseconds)."""
        self.db.execute("CREATE INDEX IF NOT EXISTS sources_kind ON sources(kind)")

    def optimize(self) -> None:
        self.db.execute("PRAGMA optimize")

    def writer(self, tokenizer: Tokenizer, options: IndexOptions) -> IndexWriter:
        """Adds and removes documents, keeping the vocabulary and session documents in step."""
        new_index, self._new = self._new, False
        return IndexWriter(self.db, tokenizer, options, new_index=new_index)

    # -- the vocabulary

    def item_count(self) -> int:
        """How many items the index holds (its meta record, kept by the writer)."""
        if self._item_count is None:
            self._item_count = int(meta_get(self.db, "items", "0") or 0)
        return self._item_count

    def present_layers(self) -> tuple[str, ...]:
        """The layers the index holds items of."""
        if self._layers is None:
            # a layer that lost all its items may still be listed: that only costs a redundant filter
            self._layers = tuple(filter(None, meta_get(self.db, "layers").split(",")))
        return self._layers

    def document_frequencies(self, terms: Sequence[str]) -> dict[str, int]:
        """term -> number of items holding it, for the given terms the index holds."""
        found: dict[str, int] = {}
        terms = list(dict.fromkeys(terms))
        for start in range(0, len(terms), 500):
            part = terms[start:start + 500]
            marks = ",".join("?" * len(part))
            found.update(self.db.execute(f"SELECT term, df FROM vocab WHERE term IN ({marks})", part).fetchall())
        return found

    def surface_words_from(self, letter: str) -> list[tuple[str, str]]:
        """(surface word, index term) of the words as written that start with `letter`."""
        upper = chr(ord(letter) + 1)
        return self.db.execute("SELECT word, term FROM surface WHERE word >= ? AND word < ? LIMIT 300000",
                               (letter, upper)).fetchall()

    def surface_words_containing(self, piece: str, limit: int) -> list[tuple[str, str]]:
        """(surface word, index term) of up to `limit` words as written that hold `piece` (a scan)."""
        return self.db.execute("SELECT word, term FROM surface WHERE instr(word, ?) > 0 LIMIT ?",
                               (piece, limit)).fetchall()

    # -- items

    def ranked_item_scores(self, terms: Sequence[str], layers: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(rowid, rank) of the best `limit` items matching any term, best first; rank is FTS5's
        (negative bm25). `layers` empty: any layer."""
        return self.db.execute("SELECT rowid, rank FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?",
                               (_match(terms, layers), limit)).fetchall()

    def matching_item_ids(self, terms: Sequence[str], layers: Sequence[str], limit: int) -> list[int]:
        """Up to `limit` rowids of items matching any term, in no particular order."""
        return [r for (r,) in self.db.execute("SELECT rowid FROM fts WHERE fts MATCH ? LIMIT ?",
                                              (_match(terms, layers), limit))]

    def newest_matching_item_ids(self, terms: Sequence[str], layers: Sequence[str], limit: int) -> list[int]:
        """The rowids of the `limit` newest items matching any term, newest first."""
        return [r for (r,) in self.db.execute("SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rowid DESC LIMIT ?",
                                              (_match(terms, layers), limit))]

    def item_rows(self, rowids: Sequence[int], context_only: bool = False) -> list[tuple]:
        """(rowid, ref, layer, date, type, item_id, session, ctx) of the given items; with
        context_only, of those that are part of a session's context document only."""
        only_context = " AND ctx = 1 AND session != ''" if context_only else ""
        rows = []
        for part in _batches(rowids, self.BATCH):
            marks = ",".join("?" * len(part))
            rows.extend(self.db.execute(f"SELECT rowid, ref, layer, date, type, item_id, session, ctx FROM items "
                                        f"WHERE rowid IN ({marks}){only_context}", part))
        return rows

    def item_texts(self, rowids: Sequence[int]) -> dict[int, str]:
        """rowid -> the item's (redacted) text, as shown."""
        if not rowids:
            return {}
        marks = ",".join("?" * len(rowids))
        return dict(self.db.execute(f"SELECT rowid, text FROM items WHERE rowid IN ({marks})", list(rowids)).fetchall())

    def item_turns(self, rowids: Sequence[int]) -> dict[int, tuple[str, str]]:
        """rowid -> (session, text), the session '' as in `item_turns_between`."""
        if not rowids:
            return {}
        marks = ",".join("?" * len(rowids))
        return {rowid: (session, text) for rowid, session, text in self.db.execute(
            f"SELECT rowid, CASE WHEN ctx = 1 THEN coalesce(session, '') ELSE '' END, text FROM items "
            f"WHERE rowid IN ({marks})", list(rowids))}

    def last_item_id(self) -> int:
        """The highest item rowid (0 for an empty index)."""
        return self.db.execute("SELECT max(rowid) FROM items").fetchone()[0] or 0

    def item_texts_between(self, low: int, high: int) -> list[tuple[int, str]]:
        """(rowid, text) of the items with rowids in [low, high], for the embedding pass."""
        return self.db.execute("SELECT rowid, text FROM items WHERE rowid BETWEEN ? AND ?", (low, high)).fetchall()

    def item_turns_between(self, low: int, high: int) -> list[tuple[int, str, str]]:
        """(rowid, session, text) of the items with rowids in [low, high]; the session is '' for an
        item that is not part of a session's context document (it has no turn before it)."""
        return self.db.execute("SELECT rowid, CASE WHEN ctx = 1 THEN coalesce(session, '') ELSE '' END, text "
                               "FROM items WHERE rowid BETWEEN ? AND ?", (low, high)).fetchall()

    def item_bodies(self, rowids: Sequence[int]) -> dict[int, str]:
        """rowid -> the item's indexed body: the layer token, then its terms, space-separated."""
        return self._bodies(rowids, "fts")

    def item_totals(self) -> tuple[int, int]:
        """(items, terms in all items): what bm25's average length is made of."""
        return self._fts_totals("fts")

    def context_item_ids_near(self, session: str, low: int, high: int) -> list[int]:
        """Rowids from low to high of the items in `session`'s context document."""
        return [r for (r,) in self.db.execute(
            "SELECT rowid FROM items WHERE session = ? AND ctx = 1 AND rowid BETWEEN ? AND ?", (session, low, high))]

    def context_item_ids_near_each(self, centres: Sequence[tuple[str, int]], span: int) -> list[list[int]]:
        """For each (session, rowid), the rowids within `span` of it in the session's context document."""
        return [self.context_item_ids_near(session, rowid - span, rowid + span) for session, rowid in centres]

    # -- session documents

    def session_document_count(self) -> int:
        """How many session documents there are (at most: the highest rowid)."""
        return self.db.execute("SELECT max(rowid) FROM sessions").fetchone()[0] or 0

    def session_keys(self, sessions: Sequence[str]) -> dict[int, str]:
        """rowid -> session key, of the given sessions' documents."""
        marks = ",".join("?" * len(sessions))
        return dict(self.db.execute(f"SELECT rowid, key FROM sessions WHERE key IN ({marks})", list(sessions)).fetchall())

    def best_session_scores(self, groups: Sequence[Sequence[str]], limit: int) -> list[list[tuple[str, float]]]:
        """For each group of terms, (session key, bm25) of the best `limit` session documents
        matching any of its terms (one FTS5 statement a group)."""
        return [self.db.execute(
            "SELECT sessions.key, -sfts.rank FROM sfts JOIN sessions ON sessions.rowid = sfts.rowid "
            "WHERE sfts MATCH ? ORDER BY sfts.rank LIMIT ?", (_match(terms, ()), limit)).fetchall() for terms in groups]

    def session_bodies(self, rowids: Sequence[int]) -> dict[int, str]:
        """rowid -> the session document's terms, space-separated."""
        return self._bodies(rowids, "sfts")

    def session_totals(self) -> tuple[int, int]:
        """(session documents, terms in all of them)."""
        return self._fts_totals("sfts")

    # -- FTS5 internals

    def _bodies(self, rowids: Sequence[int], table: str) -> dict[int, str]:
        """Read from FTS5's own content table (`<table>_content`, columns id and c0: its on-disk
        format), a plain b-tree lookup that costs half of going through the virtual table."""
        found: dict[int, str] = {}
        for part in _batches(rowids, self.BATCH):
            marks = ",".join("?" * len(part))
            try:
                rows = self.db.execute(f"SELECT id, c0 FROM {table}_content WHERE id IN ({marks})", part).fetchall()
            except sqlite3.DatabaseError:
                rows = self.db.execute(f"SELECT rowid, body FROM {table} WHERE rowid IN ({marks})", part).fetchall()
            found.update((rowid, body) for rowid, body in rows if body is not None)
        return found

    def _fts_totals(self, table: str) -> tuple[int, int]:
        if table not in self._totals:
            self._totals[table] = fts_totals(self.db, table)
        return self._totals[table]


def _match(terms: Sequence[str], layers: Sequence[str]) -> str:
    """The FTS5 expression: any of the terms (quoted), and, if layers are given, one of them."""
    match = " OR ".join(f'"{t}"' for t in terms)
    if not layers:
        return match
    layer_clause = " OR ".join(f'"{layer_token(layer)}"' for layer in layers)
    return f"({match}) AND ({layer_clause})"


def _batches(values: Sequence, size: int) -> Iterator[list]:
    values = list(values)
    for start in range(0, len(values), size):
        yield values[start:start + size]
