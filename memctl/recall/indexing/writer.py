"""Rows into SQLite: documents added and removed, with the vocabulary, the surface words
and the session documents kept in step. The SQLite store's own writer: everything else gets
one from `SQLiteStore.writer` (memctl.recall.indexing.store)."""

from __future__ import annotations

import sqlite3
from collections import Counter

from memctl.recall.indexing.prepare import Prepared, Preparer, SessionText, fts5_keeps_terms, surface_candidates, text_size
from memctl.recall.indexing.text import Tokenizer, latin_tokens

TYPE_CHECKING = False  # typing and dataclasses cost ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Iterable

    from memctl.recall.indexing.documents import Doc, IndexOptions

SESSION_DOC_MAX_TOKENS = 20_000
FTS_TOKENIZE = "unicode61 remove_diacritics 0 tokenchars '-_.'"  # the index's FTS5 tables' (memctl.recall.indexing.store)
LAYER_MARK = "\ue000"  # a private-use char: FTS5 keeps it in a token, memctl's tokenizer never emits it


def layer_token(layer: str) -> str:
    """The first term of each item's body, so that a match can be limited to layers."""
    return f"{LAYER_MARK}{layer.lower()}"


class IndexWriter:
    """Adds and removes documents, keeping the vocabulary and session documents in step.

    Added documents (or a session's text, cut into documents with the batch: SessionText) wait
    in batches while they are redacted and tokenized (memctl.recall.indexing.prepare, on every core for
    a big build) and are inserted in the order they were added, with rowids given in that
    order: the same rows as one document at a time. `finish` writes what still waits.

    Into a new index (`new_index`: a rebuild's empty file), the vocabulary is FTS5's own count
    of the rows holding each term, read once at the end (C speed, instead of counting every
    document's terms in Python and merging the batches' counts here), corrected for the few
    documents whose terms FTS5 may cut otherwise (memctl.recall.indexing.prepare.fts5_keeps_terms):
    those are counted as before."""

    def __init__(self, db: sqlite3.Connection, tokenizer: Tokenizer, options: IndexOptions,
                 new_index: bool = False):
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
        self.new_index = new_index
        self._odd_table = False  # new index: temp.odd holds the bodies whose terms FTS5 may fold otherwise
        self._preparer = Preparer(tokenizer, options, new_index=new_index)
        self._waiting: list[tuple[str, list[Doc] | SessionText]] = []  # (source key, docs or a session's text)
        self._waiting_chars = 0
        self._unwritten: set[str] = set()  # source keys with documents not inserted yet

    def expect(self, byte_count: int) -> None:
        """How much the pass is about to read: a big build starts its pool at the first batch
        instead of after the first megabytes (done on one core)."""
        self._preparer.expect(byte_count)

    def add(self, source_key: str, docs: Iterable[Doc] | SessionText) -> None:
        """A source's documents (or a session's text), inserted in this order. A long list is
        cut across batches (the same rows and rowids): a memory whose entries are most of its
        text (one L5 file) is then prepared on every core, not as one batch on one."""
        if isinstance(docs, SessionText):
            self._wait(source_key, docs, len(docs))
            return
        piece: list[Doc] = []
        size, room = 0, self._preparer.batch_chars() - self._waiting_chars
        for doc in docs:
            piece.append(doc)
            size += text_size(doc.text)
            if size >= room:
                self._wait(source_key, piece, size)
                piece, size, room = [], 0, self._preparer.batch_chars() - self._waiting_chars
        if piece:
            self._wait(source_key, piece, size)

    def _wait(self, source_key: str, docs: list[Doc] | SessionText, size: int) -> None:
        if self.next_rowid is None:  # where the pass's rows start: from the index as at its first add
            self.next_rowid = self._max_rowid() + 1
        self._waiting.append((source_key, docs))
        self._waiting_chars += size
        self._unwritten.add(source_key)
        if self._waiting_chars >= self._preparer.batch_chars():
            self._send_waiting()

    def _send_waiting(self) -> None:
        batch, self._waiting, self._waiting_chars = self._waiting, [], 0
        if batch:
            parts = [part for _, docs in batch
                     for part in ((docs,) if isinstance(docs, SessionText) else (doc.text for doc in docs))]
            self._insert_ready(self._preparer.submit(batch, parts))

    def _write_everything(self) -> None:
        self._send_waiting()
        self._insert_ready(self._preparer.drain())
        self._unwritten.clear()

    def _insert_ready(self, ready: list[tuple[list, Prepared]]) -> None:
        for batch, prepared in ready:
            self._insert_batch(batch, prepared)

    def _insert_batch(self, batch: list[tuple[str, list[Doc] | SessionText]], prepared: Prepared) -> None:
        item_rows, fts_rows = [], []
        add_item, add_fts = item_rows.append, fts_rows.append
        results = zip(prepared.texts, prepared.bodies)
        cut = iter(prepared.cut)
        batch_start = self.next_rowid
        marks: dict[str, str] = {}  # layer -> its token and the space after it (one string per layer, not per row)
        for source_key, docs in batch:
            if isinstance(docs, SessionText):
                docs = next(cut)
            first_rowid = self.next_rowid
            self.next_rowid += len(docs)
            for rowid, doc, (redacted, body) in zip(range(first_rowid, first_rowid + len(docs)), docs, results):
                layer, session, in_context = doc.layer, doc.session, doc.in_context
                add_item((rowid, source_key, doc.ref, layer, doc.date, doc.type, doc.item_id,
                          session, int(in_context), doc.text if redacted is None else redacted))
                mark = marks.get(layer)
                if mark is None:
                    mark = marks[layer] = layer_token(layer) + " "
                add_fts((rowid, mark + body))
                if session and in_context:
                    self.dirty_sessions.add(session)
            self.added += len(docs)
        self.layers.update(marks)
        if prepared.document_frequencies:
            self.df_delta.update(prepared.document_frequencies)
        self.surface_words.update(prepared.words)
        self._insert_items(item_rows, fts_rows)
        if prepared.odd:
            self._insert_odd([(batch_start + i, prepared.bodies[i]) for i in prepared.odd])

    def remove_source(self, source_key: str) -> None:
        if source_key in self._unwritten:
            self._write_everything()
        rows = self._delete_items(source_key)
        for session, ctx, body in rows:
            if body:
                self._uncount(body)
            if session and ctx:
                self.dirty_sessions.add(session)
        self.removed += len(rows)

    def keep_session_text(self, source_key: str, name: str, data: bytes) -> None:
        """A session's text as archived, for a backend that serves it to other machines (here: none)."""

    # -- this backend's statements (memctl.recall.indexing.pg_writer has the server's)

    def _max_rowid(self) -> int:
        return self.db.execute("SELECT max(rowid) FROM items").fetchone()[0] or 0

    def _insert_items(self, item_rows: list[tuple], fts_rows: list[tuple[int, str]]) -> None:
        self.db.executemany("INSERT INTO items(rowid, source, ref, layer, date, type, item_id, session, ctx, text) "
                            "VALUES(?,?,?,?,?,?,?,?,?,?)", item_rows)
        self.db.executemany("INSERT INTO fts(rowid, body) VALUES(?, ?)", fts_rows)

    def _delete_items(self, source_key: str) -> list[tuple[str, int, str]]:
        """Remove a source's items; (session, ctx, body) of each one removed."""
        rows = self.db.execute("SELECT rowid, session, ctx FROM items WHERE source=?", (source_key,)).fetchall()
        if not rows:
            return []
        removed = []
        for rowid, session, ctx in rows:
            body = self.db.execute("SELECT body FROM fts WHERE rowid=?", (rowid,)).fetchone()
            removed.append((session, ctx, body[0] if body else ""))
        self.db.executemany("DELETE FROM fts WHERE rowid=?", ((r[0],) for r in rows))
        if self._odd_table:
            self.db.executemany("DELETE FROM temp.odd WHERE rowid=?", ((r[0],) for r in rows))
        self.db.execute("DELETE FROM items WHERE source=?", (source_key,))
        return removed

    def _uncount(self, body: str) -> None:
        """A removed document's terms out of the vocabulary (a new index's FTS5 count will not
        hold them anyway, unless they were counted here)."""
        terms = body.split()[1:]
        if self.new_index and fts5_keeps_terms(" ".join(terms)):
            return
        self.df_delta.subtract(set(terms))

    def finish(self) -> None:
        try:
            self._write_everything()
        finally:
            self.close()
        self._flush_vocab()
        self._flush_surface_words()
        self._rebuild_session_docs()

    def _flush_vocab(self) -> None:
        if self.new_index:
            self._count_vocabulary_in_fts5()
        rows = [(term, delta) for term, delta in self.df_delta.items() if delta and not term.startswith(LAYER_MARK)]
        self._apply_vocab(rows)
        self.df_delta.clear()

    def _apply_vocab(self, rows: list[tuple[str, int]]) -> None:
        self.db.executemany(
            "INSERT INTO vocab(term, df) VALUES(?, ?) ON CONFLICT(term) DO UPDATE SET df = df + excluded.df", rows)
        # only terms that lost documents can have dropped to zero (a full scan costs seconds at 1 GB)
        self.db.executemany("DELETE FROM vocab WHERE term = ? AND df <= 0", ((t,) for t, d in rows if d < 0))

    def _count_vocabulary_in_fts5(self) -> None:
        """A new index's vocabulary from FTS5's per-term row counts (layer tokens left out),
        less FTS5's count of the odd documents, whose own terms `df_delta` holds."""
        not_layer = f"(term < '{LAYER_MARK}' OR term >= '{chr(ord(LAYER_MARK) + 1)}')"
        self.db.execute("CREATE VIRTUAL TABLE temp.fts_terms USING fts5vocab(main, fts, 'row')")
        self.db.execute(f"INSERT INTO vocab(term, df) SELECT term, doc FROM temp.fts_terms WHERE {not_layer}")
        self.db.execute("DROP TABLE temp.fts_terms")
        if not self._odd_table:
            return
        self.db.execute("CREATE VIRTUAL TABLE temp.odd_terms USING fts5vocab(temp, odd, 'row')")
        self.db.execute("INSERT INTO vocab(term, df) SELECT term, -doc FROM temp.odd_terms WHERE true "
                        "ON CONFLICT(term) DO UPDATE SET df = df + excluded.df")
        self.db.execute("DELETE FROM vocab WHERE df <= 0 AND term IN (SELECT term FROM temp.odd_terms)")
        self.db.execute("DROP TABLE temp.odd_terms")
        self.db.execute("DROP TABLE temp.odd")
        self._odd_table = False

    def _insert_odd(self, rows: list[tuple[int, str]]) -> None:
        """New index: the bodies FTS5 may fold otherwise, under their items' rowids, into a
        temporary FTS5 table (its counts are taken off FTS5's own at the end)."""
        if not self._odd_table:
            self.db.execute(f"CREATE VIRTUAL TABLE temp.odd USING fts5(body, tokenize=\"{FTS_TOKENIZE}\")")
            self._odd_table = True
        self.db.executemany("INSERT INTO temp.odd(rowid, body) VALUES(?, ?)", rows)

    def close(self) -> None:
        """Stop the preparing processes, if any (what waits is dropped: call after a failure)."""
        self._preparer.close()

    def _flush_surface_words(self) -> None:
        words = {w.lower() for w in surface_candidates(self.surface_words)}
        rows = [(w, terms[0]) for w in words for terms in (latin_tokens(w),) if terms]
        self._insert_surface(rows)
        self.surface_words.clear()

    def _insert_surface(self, rows: list[tuple[str, str]]) -> None:
        self.db.executemany("INSERT OR IGNORE INTO surface(word, term) VALUES(?, ?)", rows)

    def _rebuild_session_docs(self) -> None:
        for session in sorted(self.dirty_sessions):
            terms = session_terms(self._context_bodies(session))
            rowid = self._session_rowid(session)
            if rowid is not None:
                self._delete_session_doc(rowid, keep_key=bool(terms))
            if terms:
                self._insert_session_doc(session, rowid, " ".join(terms))
        self.dirty_sessions.clear()

    def _context_bodies(self, session: str) -> Iterable[str]:
        return (body for (body,) in self.db.execute(
            "SELECT fts.body FROM items JOIN fts ON fts.rowid = items.rowid WHERE items.session=? AND items.ctx=1",
            (session,)))

    def _session_rowid(self, session: str) -> int | None:
        row = self.db.execute("SELECT rowid FROM sessions WHERE key=?", (session,)).fetchone()
        return row[0] if row else None

    def _delete_session_doc(self, rowid: int, keep_key: bool) -> None:
        self.db.execute("DELETE FROM sfts WHERE rowid=?", (rowid,))
        if not keep_key:
            self.db.execute("DELETE FROM sessions WHERE rowid=?", (rowid,))

    def _insert_session_doc(self, session: str, rowid: int | None, body: str) -> None:
        if rowid is None:
            rowid = self.db.execute("INSERT INTO sessions(key) VALUES(?)", (session,)).lastrowid
        self.db.execute("INSERT INTO sfts(rowid, body) VALUES(?, ?)", (rowid, body))


def session_terms(bodies: Iterable[str]) -> list[str]:
    """A session document's terms: its context items' terms in order, up to the cap (the
    item that crosses it is kept whole)."""
    terms: list[str] = []
    for body in bodies:
        terms.extend(body.split()[1:])
        if len(terms) > SESSION_DOC_MAX_TOKENS:
            break
    return terms
