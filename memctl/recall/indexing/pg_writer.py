"""The index writer of the PostgreSQL backend (memctl.recall.indexing.pg_store): the documents, the
vocabulary and the session documents of memctl.recall.indexing.writer.IndexWriter, in the server's
tables. Only the statements differ; what is written (rowids, bodies, document frequencies,
session documents) is the SQLite writer's, so both backends rank alike.

Besides each body, the server keeps its length and term counts (what FTS5 keeps in its own
structures for bm25), the per-layer item counts (as vocabulary rows of the layer tokens: a
layer-limited query's bm25 counts them as phrases) and the index's totals.

Each batch of rows is one statement (arrays through `unnest`: psycopg's executemany costs a
round trip or more per call), and the vocabulary's and surface words' changes are one statement
at the end (issue #30: a refresh's round trips sit on the search path of `memctl serve`)."""

from __future__ import annotations

import json
import zlib
from collections import Counter

from memctl.core import faults
from memctl.recall.indexing.prepare import SessionText
from memctl.recall.indexing.writer import LAYER_MARK, IndexWriter, layer_token

TYPE_CHECKING = False
if TYPE_CHECKING:
    from memctl.recall.indexing.documents import IndexOptions
    from memctl.recall.indexing.text import Tokenizer


class PgIndexWriter(IndexWriter):
    def __init__(self, store,  # memctl.recall.indexing.pg_store.PostgresIndexStore
                 tokenizer: Tokenizer, options: IndexOptions):
        super().__init__(store.db, tokenizer, options)
        self.store = store
        self.layer_delta: Counter[str] = Counter()
        self.totals_delta = {"items_rows": 0, "items_terms": 0, "sessions_rows": 0, "sessions_terms": 0}
        self._vocab_rows: list[tuple[str, int]] = []  # written with the surface words (_insert_surface)

    def _sql(self, statement: str) -> str:
        return statement.replace("{s}.", self.store.schema + ".")

    def _max_rowid(self) -> int:
        kept = self.store.kept_max_rowid()  # read under the index lock with the refresh's state
        if kept is not None:
            return kept
        return self.db.execute(self._sql("SELECT max(rowid) FROM {s}.index_items")).fetchone()[0] or 0

    def _send_waiting(self) -> None:
        """The waiting documents' CJK words looked up in one statement first (VocabSegmenter)."""
        prefetch = getattr(getattr(self.tokenizer, "cjk_segmenter", None), "prefetch", None)
        if prefetch is not None and self._waiting:
            prefetch([doc.text for _, docs in self._waiting if not isinstance(docs, SessionText) for doc in docs])
        super()._send_waiting()

    def add(self, source_key, docs) -> None:
        super().add(self.store.source_key(source_key), docs)

    def remove_source(self, source_key: str) -> None:
        key = self.store.source_key(source_key)
        super().remove_source(key)
        self.db.execute(self._sql("DELETE FROM {s}.session_texts WHERE source = %s"), (key,))

    def keep_session_text(self, source_key: str, name: str, data: bytes) -> None:
        """The member's text, compressed, so that `show` finds the session on any machine."""
        self.db.execute(self._sql("INSERT INTO {s}.session_texts VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE "
                                  "SET source = EXCLUDED.source, data = EXCLUDED.data"),
                        (name, self.store.source_key(source_key), zlib.compress(data, 6)))

    def _insert_items(self, item_rows: list[tuple], fts_rows: list[tuple[int, str]]) -> None:
        rows = []
        for item, (_, body) in zip(item_rows, fts_rows):
            terms = body.split()
            self.layer_delta[layer_token(item[3])] += 1
            self.totals_delta["items_rows"] += 1
            self.totals_delta["items_terms"] += len(terms)
            counts = json.dumps(Counter(terms[1:]), ensure_ascii=False)
            rows.append((*item[:9], _text(item[9]), body, len(terms), counts))
        faults.checkpoint("index-insert")  # a kill test: the transaction dies with its half-written rows
        if rows:
            self.db.execute(self._sql(ITEMS_INSERT), list(map(list, zip(*rows))))

    def _delete_items(self, source_key: str) -> list[tuple[str, int, str]]:
        rows = self.db.execute(self._sql("DELETE FROM {s}.index_items WHERE source = %s "
                                         "RETURNING session, ctx, body, layer, length"), (source_key,)).fetchall()
        for _, _, _, layer, length in rows:
            self.layer_delta[layer_token(layer)] -= 1
            self.totals_delta["items_rows"] -= 1
            self.totals_delta["items_terms"] -= length
        return [(session, ctx, body) for session, ctx, body, _, _ in rows]

    def finish(self) -> None:
        super().finish()
        for key, delta in self.totals_delta.items():
            if delta:
                self.store.set_meta(key, str(int(self.store.meta(key, "0")) + delta))
            self.totals_delta[key] = 0

    def _flush_vocab(self) -> None:
        """The terms' and the layer tokens' changes, kept for _insert_surface (next in finish)."""
        self._vocab_rows = [(t, d) for t, d in self.df_delta.items() if d and not t.startswith(LAYER_MARK)]
        self._vocab_rows += [(t, d) for t, d in self.layer_delta.items() if d]
        self.df_delta.clear()
        self.layer_delta.clear()

    def _insert_surface(self, rows: list[tuple[str, str]]) -> None:
        """The vocabulary's changes and the new surface words in one statement; the terms that
        lost their last document out of the vocabulary after it."""
        vocab, self._vocab_rows = self._vocab_rows, []
        if vocab or rows:
            terms, deltas = (list(c) for c in zip(*vocab)) if vocab else ([], [])
            words, stems = (list(c) for c in zip(*rows)) if rows else ([], [])
            self.db.execute(self._sql(VOCAB_AND_SURFACE), (terms, deltas, words, stems))
        gone = [term for term, delta in vocab if delta < 0]
        if gone:
            self.db.execute(self._sql("DELETE FROM {s}.index_vocab WHERE term = ANY(%s) AND df <= 0"), (gone,))

    def _context_bodies(self, session: str):
        return (body for (body,) in self.db.execute(self._sql(
            "SELECT body FROM {s}.index_items WHERE session = %s AND ctx = 1 ORDER BY rowid"), (session,)).fetchall())

    def _session_rowid(self, session: str) -> int | None:
        row = self.db.execute(self._sql("SELECT rowid FROM {s}.index_sessions WHERE key = %s"), (session,)).fetchone()
        return row[0] if row else None

    def _delete_session_doc(self, rowid: int, keep_key: bool) -> None:
        row = self.db.execute(self._sql("SELECT length FROM {s}.index_sessions WHERE rowid = %s"), (rowid,)).fetchone()
        if row and row[0] is not None:
            self.totals_delta["sessions_rows"] -= 1
            self.totals_delta["sessions_terms"] -= row[0]
        if keep_key:
            self.db.execute(self._sql("UPDATE {s}.index_sessions SET body = NULL, length = NULL, tf = NULL "
                                      "WHERE rowid = %s"), (rowid,))
        else:
            self.db.execute(self._sql("DELETE FROM {s}.index_sessions WHERE rowid = %s"), (rowid,))

    def _insert_session_doc(self, session: str, rowid: int | None, body: str) -> None:
        terms = body.split()
        self.totals_delta["sessions_rows"] += 1
        self.totals_delta["sessions_terms"] += len(terms)
        counts = json.dumps(Counter(terms), ensure_ascii=False)
        if rowid is None:  # as SQLite numbers a new row: one past the highest
            self.db.execute(self._sql(
                "INSERT INTO {s}.index_sessions SELECT coalesce(max(rowid), 0) + 1, %s, %s, %s, %s "
                "FROM {s}.index_sessions"), (session, body, len(terms), counts))
        else:
            self.db.execute(self._sql("UPDATE {s}.index_sessions SET body = %s, length = %s, tf = %s "
                                      "WHERE rowid = %s"), (body, len(terms), counts, rowid))


ITEMS_INSERT = (
    "INSERT INTO {s}.index_items(rowid, source, ref, layer, date, type, item_id, session, ctx, text, body, length, tf) "
    "SELECT r, so, re, la, da, ty, it, se, ct, te, bo, le, tf::jsonb FROM unnest(%s::bigint[], %s::text[], "
    "%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::int[], %s::text[], %s::text[], "
    "%s::int[], %s::text[]) AS u(r, so, re, la, da, ty, it, se, ct, te, bo, le, tf)")
VOCAB_AND_SURFACE = (
    "WITH vocab AS (INSERT INTO {s}.index_vocab SELECT * FROM unnest(%s::text[], %s::int[]) ON CONFLICT (term) "
    "DO UPDATE SET df = index_vocab.df + EXCLUDED.df RETURNING 1) "
    "INSERT INTO {s}.index_surface SELECT * FROM unnest(%s::text[], %s::text[]) ON CONFLICT DO NOTHING")


def _text(text: str) -> str:
    """PostgreSQL's text cannot hold NUL: the shown text drops it (its terms never held it)."""
    return text.replace("\x00", "") if "\x00" in text else text
