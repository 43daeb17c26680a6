"""Rows into SQLite: documents added and removed, with the vocabulary, the surface words
and the session documents kept in step. The SQLite store's own writer: everything else gets
one from `SQLiteStore.writer` (memctl.recall.store)."""

from __future__ import annotations

import sqlite3
from collections import Counter

from memctl.recall.text import Tokenizer, latin_tokens

TYPE_CHECKING = False  # typing and dataclasses cost ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Iterable

    from memctl.recall.documents import Doc, IndexOptions

SESSION_DOC_MAX_TOKENS = 20_000
LAYER_MARK = "\ue000"  # a private-use char: FTS5 keeps it in a token, memctl's tokenizer never emits it


def layer_token(layer: str) -> str:
    """The first term of each item's body, so that a match can be limited to layers."""
    return f"{LAYER_MARK}{layer.lower()}"


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
