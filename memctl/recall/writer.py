"""Rows into SQLite: documents added and removed, with the vocabulary, the surface words
and the session documents kept in step. The SQLite store's own writer: everything else gets
one from `SQLiteStore.writer` (memctl.recall.store)."""

from __future__ import annotations

import sqlite3
from collections import Counter

from memctl.recall.prepare import BATCH_CHARS, Prepared, Preparer
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
    """Adds and removes documents, keeping the vocabulary and session documents in step.

    Added documents wait in batches while they are redacted and tokenized (memctl.recall.prepare,
    on every core for a big build) and are inserted in the order they were added, with rowids
    given at `add`: the same rows as one document at a time. `finish` writes what still waits."""

    def __init__(self, db: sqlite3.Connection, tokenizer: Tokenizer, options: IndexOptions):
        self.db = db
        self.tokenizer = tokenizer
        self.options = options
        self.df_delta: Counter[str] = Counter()
        self.dirty_sessions: set[str] = set()
        self.surface_words: set[str] = set()
        self.added = 0
        self.removed = 0
        self.next_rowid: int | None = None
        self.layers: set[str] = set()
        self._preparer = Preparer(tokenizer, options)
        self._waiting: list[tuple[str, int, list[Doc]]] = []  # (source key, first rowid, docs)
        self._waiting_chars = 0
        self._unwritten: set[str] = set()  # source keys with documents not inserted yet

    def add(self, source_key: str, docs: Iterable[Doc]) -> None:
        docs = list(docs)
        if not docs:
            return
        if self.next_rowid is None:
            self.next_rowid = (self.db.execute("SELECT max(rowid) FROM items").fetchone()[0] or 0) + 1
        self._waiting.append((source_key, self.next_rowid, docs))
        self._unwritten.add(source_key)
        self.next_rowid += len(docs)
        self._waiting_chars += sum(len(doc.text) for doc in docs)
        if self._waiting_chars >= BATCH_CHARS:
            self._send_waiting()

    def _send_waiting(self) -> None:
        batch, self._waiting, self._waiting_chars = self._waiting, [], 0
        if batch:
            texts = [doc.text for _, _, docs in batch for doc in docs]
            self._insert_ready(self._preparer.submit(batch, texts))

    def _write_everything(self) -> None:
        self._send_waiting()
        self._insert_ready(self._preparer.drain())
        self._unwritten.clear()

    def _insert_ready(self, ready: list[tuple[list, Prepared]]) -> None:
        for batch, prepared in ready:
            self._insert_batch(batch, prepared)

    def _insert_batch(self, batch: list[tuple[str, int, list[Doc]]], prepared: Prepared) -> None:
        item_rows, fts_rows = [], []
        results = zip(prepared.texts, prepared.bodies)
        for source_key, first_rowid, docs in batch:
            for rowid, doc, (redacted, body) in zip(range(first_rowid, first_rowid + len(docs)), docs, results):
                item_rows.append((rowid, source_key, doc.ref, doc.layer, doc.date, doc.type, doc.item_id,
                                  doc.session, int(doc.in_context), doc.text if redacted is None else redacted))
                fts_rows.append((rowid, f"{layer_token(doc.layer)} {body}"))
                if doc.session and doc.in_context:
                    self.dirty_sessions.add(doc.session)
                self.layers.add(doc.layer)
            self.added += len(docs)
        self.df_delta.update(prepared.document_frequencies)
        self.surface_words.update(prepared.words)
        self.db.executemany("INSERT INTO items(rowid, source, ref, layer, date, type, item_id, session, ctx, text) "
                            "VALUES(?,?,?,?,?,?,?,?,?,?)", item_rows)
        self.db.executemany("INSERT INTO fts(rowid, body) VALUES(?, ?)", fts_rows)

    def remove_source(self, source_key: str) -> None:
        if source_key in self._unwritten:
            self._write_everything()
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
        try:
            self._write_everything()
        finally:
            self.close()
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

    def close(self) -> None:
        """Stop the preparing processes, if any (what waits is dropped: call after a failure)."""
        self._preparer.close()

    def _flush_surface_words(self) -> None:
        words = {w.lower() for w in self.surface_words if len(w) >= 4 and w.isalpha()}
        rows = [(w, terms[0]) for w in words for terms in (latin_tokens(w),) if terms]
        self.db.executemany("INSERT OR IGNORE INTO surface(word, term) VALUES(?, ?)", rows)
        self.surface_words.clear()

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
