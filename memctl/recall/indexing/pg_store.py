"""The derived index on PostgreSQL (`[store] backend = "postgres"`, issue #14): the second
backend of the index store, with the method set of memctl.recall.indexing.store.SQLiteStore.

The server stores and retrieves; memctl ranks. Each item keeps its body (the layer token,
then memctl's own terms, space-separated, exactly as FTS5 holds it), its length and its term
counts (`tf`, a jsonb object with a GIN index: PostgreSQL's parsers would split `bk-02` and
`sk_live`, so no tsvector). The rank `ranked_item_scores` returns is FTS5's bm25 computed here
with FTS5's formula, operation for operation, from the vocabulary's document frequencies and
the index's totals, so ranking over either backend gives the same numbers.

Several machines share one index: sources from this machine's files (L1-L3, L4 zips and
histories) are keyed `host:/root/relative-path`, and each machine's refresh sees, updates and
forgets only its own; the keys handed to and from `Refresh` stay relative. L5 and L6 come from
the server's `entries` rows when the memory's entries live there (the `longterm` component,
memctl.longterm), as the sources `server:L5` / `server:L6`: their `size` is the last `seq`
indexed, their `mtime_ns` the part's `rewrites` (see `row_sources`). One refresher at a time
per memory (a transaction-level advisory lock); a search never waits for it.
"""

from __future__ import annotations

import contextlib

from memctl.core import pg
from memctl.longterm.pg_shared import record_refs
from memctl.longterm.pg_store import translated
from memctl.recall.indexing.pg_lookups import ITEM_COLUMNS, SearchLookups, id_array
from memctl.recall.indexing.pg_schema import COMPONENT, STEPS
from memctl.recall.indexing.scoring import B, K1, MIN_IDF
from memctl.recall.indexing.sources import Source
from memctl.recall.indexing.writer import layer_token

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Iterator, Sequence

    from memctl.recall.indexing.documents import IndexOptions
    from memctl.recall.indexing.pg_writer import PgIndexWriter
    from memctl.recall.indexing.text import Tokenizer

SERVER_PREFIX = "server:"  # sources on the server itself (L5/L6 rows), shared by every machine
PARTS = (("active", "L5"), ("archive", "L6"))
LOCAL_META = ("config", "l4_dir")  # meta records of one machine's files, kept per machine

# What a refresh reads before it writes, in one statement (issue #30: each was a round trip of
# its own, read twice: before the lock and under it): the entry parts' last seqs, this
# machine's and the server's tracked sources, the meta with the index's generation, the
# highest rowid and whether the vocabulary holds anything. Each row is tagged by its first column.
REFRESH_STATE = """
SELECT 's', key, kind, size, mtime_ns, tail, state FROM {s}.index_sources
 WHERE (starts_with(key, %s) OR starts_with(key, %s))
UNION ALL SELECT 'm', key, NULL, NULL, NULL, value, NULL FROM {s}.index_meta
UNION ALL SELECT 'g', NULL, NULL, value, NULL, NULL, NULL FROM {s}.index_generation
UNION ALL SELECT 'r', NULL, NULL, max(rowid), NULL, NULL, NULL FROM {s}.index_items
UNION ALL SELECT 'v', NULL, NULL, count(*), NULL, NULL, NULL FROM (SELECT 1 FROM {s}.index_vocab LIMIT 1) AS any_term
"""
REFRESH_STATE_PARTS = "UNION ALL SELECT 'p', part, NULL, last_seq, rewrites, NULL, NULL FROM {s}.entry_parts"

def migrate_index(conn, schema: str) -> int:
    """Create or upgrade the index tables of `schema` (`memctl init` calls this)."""
    return pg.migrate(conn, schema, COMPONENT, STEPS)


def machine_prefix(root: Path) -> str:
    """`host:/absolute/root/`: this machine's sources apart from every other machine's."""
    return pg.machine_key(root)


class RefreshBusy(Exception):
    """Another process holds the index lock (a search then uses the index as it is)."""


class PostgresIndexStore:
    """memctl.recall.indexing.store.SQLiteStore's methods over one memory's schema on the server. Rows
    come in rowid order, as SQLite gives them: the stages add floats up in that order."""

    def __init__(self, conn, schema: str, prefix: str):
        self.db = conn
        self.schema = schema
        self.prefix = prefix
        self._meta: dict[str, str] | None = None
        self._totals: dict[str, tuple[int, int]] = {}
        self.wait_for_lock = True
        self.where = pg.where(conn.info.dsn)
        self._lookups: SearchLookups | None = None  # inside search_scope()
        self._meta_generation: int | None = None  # the index's generation when _meta was read
        self._kept = SearchLookups(self._rows, self._read_generation)  # between searches, per generation
        self._entry_parts: bool = False  # the memory's entries are on the server (seen once: they stay)
        self._has_vocabulary: bool | None = None  # read with the refresh's state
        self._max_rowid: int | None = None  # read under the index lock with the refresh's state
        self._writing = False  # inside transaction(): meta and source records wait for its end
        self._pending_meta: dict[str, str] = {}
        self._pending_sources: dict[str, tuple] = {}

    @classmethod
    def connect(cls, dsn: str, memory: str, root: Path, migrate: bool = False) -> PostgresIndexStore:
        """The index of memory `memory` on the server (its tables created first with `migrate`)."""
        conn = pg.connect(dsn, autocommit=True)  # reads see each commit; writes are in transaction()
        schema = pg.schema_for(memory)
        try:
            if migrate and pg.schema_version(conn, schema, COMPONENT) < len(STEPS):
                migrate_index(conn, schema)  # the index is derived: its tables are made when missing
            pg.require_version(conn, schema, COMPONENT, STEPS)
        except BaseException:
            conn.close()
            raise
        return cls(conn, schema, machine_prefix(root))

    on_server = True

    def close(self) -> None:
        self.db.close()

    @property
    def read_only(self) -> bool:
        """A read-only session (a hot standby, or a role with default_transaction_read_only on):
        searches there write nothing, neither the refresh nor the references. Both settings are
        reported by the server at connect (PostgreSQL 14+), so asking costs no round trip."""
        status = self.db.info.parameter_status
        return "on" in (status("default_transaction_read_only"), status("in_hot_standby"))

    def record_refs(self, ids: Sequence[str], when: str) -> None:
        """The L5 hits of a search, as rows of the memory's `refs` (memctl.longterm.pg_shared);
        on a read-only session none (a dream counts the references the writable searches made)."""
        if self.read_only:
            return
        with translated(self.where):
            record_refs(self.db, self.schema, list(ids), when)

    @contextlib.contextmanager
    def search_scope(self) -> Iterator[None]:
        """One search: its repeated lookups are answered from what it fetched already, each
        statement bringing what the next stage asks for (memctl.recall.indexing.pg_lookups)."""
        self._kept.start_search()
        self._lookups = self._kept
        try:
            yield
        finally:
            self._lookups = None

    def _forget_meta(self) -> None:
        self._meta = None
        self._totals.clear()
        self._has_vocabulary = self._max_rowid = None

    def _read_generation(self, generation: int) -> None:
        """A search read the index's generation: the meta read at another is stale."""
        if generation != self._meta_generation:
            self._forget_meta()

    def table(self, name: str) -> str:
        return f"{self.schema}.{name}"

    def _rows(self, sql: str, params: Sequence = ()) -> list[tuple]:
        with translated(self.where):  # a server gone mid-search: one line naming it, exit 2
            return self.db.execute(sql.replace("{s}.", self.schema + "."), params).fetchall()

    def _run(self, sql: str, params: Sequence = ()) -> None:
        with translated(self.where):
            self.db.execute(sql.replace("{s}.", self.schema + "."), params)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """All the writes inside, or none, under the memory's index lock (one refresher at a
        time on every machine); with `wait_for_lock` false a busy lock raises RefreshBusy."""
        self._forget_meta()
        self._pending_meta.clear()
        self._pending_sources.clear()
        try:
            with self.db.transaction():
                key = pg.lock_key(self.schema, "index")
                if self.wait_for_lock:
                    self._run("SELECT pg_advisory_xact_lock(%s)", (key,))
                elif not self._rows("SELECT pg_try_advisory_xact_lock(%s)", (key,))[0][0]:
                    raise RefreshBusy(f"another memctl is refreshing the index of {self.schema}")
                self._writing = True
                yield
                self._writing = False
                self._finish_writes()
        finally:
            self._writing = False
            self._forget_meta()

    def _finish_writes(self) -> None:
        """The transaction's meta and source records (kept until now: one statement for all of
        them, not one each) with the index's generation: a transaction that wrote anything
        tells every searcher to drop what it kept (memctl.recall.indexing.pg_lookups); one that
        found nothing to do leaves their caches."""
        sources, meta = list(self._pending_sources.values()), self._pending_meta
        self._pending_sources, self._pending_meta = {}, {}
        if not sources and not meta:
            self._run("UPDATE {s}.index_generation SET value = value + 1 "
                      "WHERE pg_current_xact_id_if_assigned() IS NOT NULL")
            return
        columns = list(zip(*sources)) if sources else [[]] * 6
        self._run("WITH kept_sources AS (" + SOURCES_UPSERT + "), kept_meta AS (" + META_UPSERT + ") "
                  "UPDATE {s}.index_generation SET value = value + 1",
                  [*map(list, columns), list(meta), list(meta.values())])

    # -- keys: this machine's files carry its prefix on the server

    def source_key(self, key: str) -> str:
        return key if key.startswith(SERVER_PREFIX) else self.prefix + key

    def _local_key(self, key: str) -> str:
        return key[len(self.prefix):] if key.startswith(self.prefix) else key

    def _mine(self) -> str:
        return "(starts_with(key, %s) OR starts_with(key, %s))"

    # -- refresh: what the index holds of each source

    def meta(self, key: str, default: str = "") -> str:
        if self._meta is None:
            self._meta = dict(self._rows("SELECT key, value FROM {s}.index_meta UNION ALL "
                                         "SELECT NULL, value::text FROM {s}.index_generation"))
            self._meta_generation = int(self._meta.pop(None))
        return self._meta.get(self._meta_key(key), default)

    def set_meta(self, key: str, value: str) -> None:
        if self.meta(key) == value and self._meta_key(key) in self._meta:
            return  # unwritten: a refresh with nothing to do leaves the index's generation as it was
        if self._writing:  # written with the transaction's last statement
            self._pending_meta[self._meta_key(key)] = value
            self._meta[self._meta_key(key)] = value
            return
        self._run("INSERT INTO {s}.index_meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                  (self._meta_key(key), value))
        if self._meta is not None:
            self._meta[self._meta_key(key)] = value

    def _meta_key(self, key: str) -> str:
        return f"{key}@{self.prefix}" if key in LOCAL_META else key

    def has_vocabulary(self) -> bool:
        if self._has_vocabulary is None:
            self._has_vocabulary = bool(self._rows("SELECT 1 FROM {s}.index_vocab LIMIT 1"))
        return self._has_vocabulary

    def refresh_state(self, include_l6: bool) -> tuple[list[Source] | None, dict[str, tuple]]:
        """(row_sources, tracked_sources) in one statement, which also reads the meta, the
        highest rowid (for the writer: under the index lock no one else adds rows) and whether
        the vocabulary holds anything (see REFRESH_STATE)."""
        self._flush_sources()
        parts_known = self._entry_parts or self._has_entry_parts()
        sql = REFRESH_STATE + (REFRESH_STATE_PARTS if parts_known else "")
        meta, tracked, parts = {}, {}, {}
        for tag, key, kind, size, mtime_ns, tail, state in self._rows(sql, (self.prefix, SERVER_PREFIX)):
            if tag == "s":
                tracked[self._local_key(key)] = (self._local_key(key), kind, size, mtime_ns, tail, state)
            elif tag == "m":
                meta[key] = tail
            elif tag == "g":
                self._meta_generation = size
            elif tag == "r":
                self._max_rowid = size or 0
            elif tag == "v":
                self._has_vocabulary = bool(size)
            else:
                parts[key] = (size or 0, mtime_ns or 0)
        self._meta = meta
        self._totals.clear()
        return (self._part_sources(parts, include_l6) if parts_known else None), tracked

    def kept_max_rowid(self) -> int | None:
        """The highest rowid as read under this transaction's lock, or None."""
        return self._max_rowid

    def _flush_sources(self) -> None:
        """The source records kept so far written now: a read of index_sources follows."""
        if self._pending_sources:
            sources, self._pending_sources = list(self._pending_sources.values()), {}
            self._run(SOURCES_UPSERT, list(map(list, zip(*sources))))

    def tracked_sources(self) -> dict[str, tuple]:
        self._flush_sources()
        rows = self._rows("SELECT key, kind, size, mtime_ns, tail, state FROM {s}.index_sources WHERE " + self._mine(),
                          (self.prefix, SERVER_PREFIX))
        return {self._local_key(row[0]): (self._local_key(row[0]), *row[1:]) for row in rows}

    def sources_of_kinds(self, kinds: Sequence[str]) -> list[tuple[str, str, int, int]]:
        self._flush_sources()
        rows = self._rows("SELECT key, kind, size, mtime_ns FROM {s}.index_sources WHERE kind = ANY(%s) AND "
                          "starts_with(key, %s)", (list(kinds), self.prefix))
        return [(self._local_key(key), *rest) for key, *rest in rows]

    def member_signatures(self, zip_key: str) -> dict[str, str]:
        self._flush_sources()
        rows = self._rows("SELECT key, tail FROM {s}.index_sources WHERE starts_with(key, %s) AND kind = 'member'",
                          (self.source_key(zip_key) + "!",))
        return {self._local_key(key): tail for key, tail in rows}

    def record_source(self, key: str, kind: str, size: int, mtime_ns: int, tail: str, state: str) -> None:
        row = (self.source_key(key), kind, size, mtime_ns, tail, state)
        self._pending_sources[row[0]] = row
        if not self._writing:
            self._flush_sources()

    def drop_source(self, key: str) -> None:
        self._flush_sources()
        self._run("DELETE FROM {s}.index_sources WHERE key = %s", (self.source_key(key),))

    def upgrade_schema(self) -> None:
        """The server's tables are versioned by memctl.core.pg.migrate: nothing to add here."""

    def optimize(self) -> None:
        """PostgreSQL's autovacuum keeps the statistics."""

    def writer(self, tokenizer: Tokenizer, options: IndexOptions) -> PgIndexWriter:
        from memctl.recall.indexing.pg_writer import PgIndexWriter

        return PgIndexWriter(self, tokenizer, options)

    def mark_all_changed(self) -> None:
        """A rebuild of this machine's part: every source it tracked (and the server's rows)
        reads as changed, so the next pass removes and indexes each one again, and forgets
        the ones that are gone. Other machines' items stay."""
        self._flush_sources()
        self._run("UPDATE {s}.index_sources SET size = -1, mtime_ns = -1, tail = '' WHERE " + self._mine(),
                  (self.prefix, SERVER_PREFIX))

    # -- L5 and L6 rows of the entry store on the server

    def row_sources(self, include_l6: bool) -> list[Source] | None:
        """`server:L5` and `server:L6` as sources (size: the part's last seq, mtime_ns: its
        rewrites), or None when the memory's entries are not on the server (then L5 and L6
        are this machine's files, indexed like the other files)."""
        if not (self._entry_parts or self._has_entry_parts()):
            return None
        parts = dict((part, (last or 0, rewrites or 0)) for part, last, rewrites in
                     self._rows("SELECT part, last_seq, rewrites FROM {s}.entry_parts"))
        return self._part_sources(parts, include_l6)

    def _has_entry_parts(self) -> bool:
        self._entry_parts = self._rows("SELECT to_regclass(%s)", (self.table("entry_parts"),))[0][0] is not None
        return self._entry_parts

    def _part_sources(self, parts: dict[str, tuple[int, int]], include_l6: bool) -> list[Source]:
        found = []
        for part, layer in PARTS:
            if layer == "L6" and not include_l6:
                continue
            last, rewrites = parts.get(part, (0, 0))
            found.append(Source(SERVER_PREFIX + layer, part, "rows", last, rewrites))
        return found

    def entry_lines(self, part: str, after_seq: int, up_to_seq: int) -> bytes:
        """The raw lines of a part's rows with after_seq < seq <= up_to_seq, in order."""
        rows = self._rows("SELECT raw FROM {s}.entries WHERE part = %s AND seq > %s AND seq <= %s ORDER BY seq",
                          (part, after_seq, up_to_seq))
        return b"".join(bytes(raw) for (raw,) in rows)

    # -- the vocabulary

    def item_count(self) -> int:
        return int(self.meta("items", "0") or 0)

    def present_layers(self) -> tuple[str, ...]:
        return tuple(filter(None, self.meta("layers").split(",")))

    def document_frequencies(self, terms: Sequence[str]) -> dict[str, int]:
        terms = list(dict.fromkeys(terms))
        if not terms:
            return {}
        if self._lookups is not None:  # the layer tokens too: the candidates' bm25 asks for them next
            return self._lookups.document_frequencies(terms, [layer_token(x) for x in self.present_layers()])
        # in term order, as SQLite walks its primary key: the scores sum the terms in this order
        return dict(self._rows("SELECT term, df FROM {s}.index_vocab WHERE term = ANY(%s) ORDER BY term", (terms,)))

    def surface_words_from(self, letter: str) -> list[tuple[str, str]]:
        return self._rows("SELECT word, term FROM {s}.index_surface WHERE word >= %s AND word < %s "
                          "ORDER BY word LIMIT 300000", (letter, chr(ord(letter) + 1)))

    def surface_words_containing(self, piece: str, limit: int) -> list[tuple[str, str]]:
        return self._rows("SELECT word, term FROM {s}.index_surface WHERE strpos(word, %s) > 0 LIMIT %s",
                          (piece, limit))

    # -- items

    def ranked_item_scores(self, terms: Sequence[str], layers: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(rowid, rank) as FTS5's `ORDER BY rank LIMIT` gives them: rank = -bm25 over the
        query's phrases, the layer tokens included when layers are given."""
        tokens = [layer_token(layer) for layer in layers]
        dfs = self.document_frequencies([*terms, *tokens])  # a layer token's row counts its layer's items
        totals = self.item_totals()
        idfs = fts5_idfs([dfs.get(t, 0) for t in [*terms, *tokens]], totals[0])
        counts, count_params = phrase_counts_sql(terms, layers)
        rank, rank_params = fts5_rank_sql(idfs, totals)
        where, params = _where(terms, layers)
        # ranked on the server (only the best `limit` rows come back, with what hydrate asks for
        # next); the IDFs are computed here, so the server only adds, multiplies and divides.
        # OFFSET 0 keeps the inner select a subquery: flattened, each term's count would be read
        # from the jsonb twice per row (the rank names each twice)
        rows = self._rows(f"SELECT {ITEM_COLUMNS}, {rank} AS rank FROM (SELECT {ITEM_COLUMNS}, length, {counts} "
                          f"FROM {{s}}.index_items WHERE {where} OFFSET 0) AS matching ORDER BY rank, rowid LIMIT %s",
                          [*rank_params, *count_params, *params, limit])
        if self._lookups is not None:
            self._lookups.remember_rows(row[:-1] for row in rows)
        return [(row[0], row[-1]) for row in rows]

    def matching_item_ids(self, terms: Sequence[str], layers: Sequence[str], limit: int) -> list[int]:
        return self._ids("ORDER BY rowid", terms, layers, limit)

    def newest_matching_item_ids(self, terms: Sequence[str], layers: Sequence[str], limit: int) -> list[int]:
        return self._ids("ORDER BY rowid DESC", terms, layers, limit)

    def _ids(self, order: str, terms: Sequence[str], layers: Sequence[str], limit: int) -> list[int]:
        where, params = _where(terms, layers)
        return [r for (r,) in self._rows(f"SELECT rowid FROM {{s}}.index_items WHERE {where} {order} LIMIT %s",
                                         [*params, limit])]

    def _matching(self, table: str, terms: Sequence[str], layers: Sequence[str]) -> list[tuple]:
        """(rowid, length, layer or key, [tf of each term]) of the rows holding any term."""
        where, params = _where(terms, layers)
        counts = ", ".join(["coalesce((tf->>%s)::int, 0)"] * len(terms))
        label = "layer" if table == "index_items" else "key"
        return self._rows(f"SELECT rowid, length, {label}, ARRAY[{counts}] FROM {{s}}.{table} WHERE {where}",
                          [*terms, *params])

    def item_rows(self, rowids: Sequence[int], context_only: bool = False) -> list[tuple]:
        if self._lookups is not None:
            return self._lookups.item_rows(rowids, context_only)
        only_context = " AND ctx = 1 AND session <> ''" if context_only else ""
        return self._rows(f"SELECT {ITEM_COLUMNS} FROM {{s}}.index_items WHERE rowid = ANY(%s::bigint[]){only_context} "
                          "ORDER BY rowid", (id_array(rowids),))

    def item_texts(self, rowids: Sequence[int]) -> dict[int, str]:
        if self._lookups is not None:
            return self._lookups.item_texts(rowids)
        return dict(self._rows("SELECT rowid, text FROM {s}.index_items WHERE rowid = ANY(%s::bigint[]) ORDER BY rowid",
                               (id_array(rowids),)))

    def item_turns(self, rowids: Sequence[int]) -> dict[int, tuple[str, str]]:
        return {rowid: (session, text) for rowid, session, text in self._rows(
            "SELECT rowid, CASE WHEN ctx = 1 THEN coalesce(session, '') ELSE '' END, text FROM {s}.index_items "
            "WHERE rowid = ANY(%s::bigint[])", (id_array(rowids),))}

    def last_item_id(self) -> int:
        return self._rows("SELECT max(rowid) FROM {s}.index_items")[0][0] or 0

    def item_texts_between(self, low: int, high: int) -> list[tuple[int, str]]:
        return self._rows("SELECT rowid, text FROM {s}.index_items WHERE rowid BETWEEN %s AND %s ORDER BY rowid",
                          (low, high))

    def item_bodies(self, rowids: Sequence[int]) -> dict[int, str]:
        if self._lookups is not None:
            return self._lookups.item_bodies(rowids)
        return dict(self._rows("SELECT rowid, body FROM {s}.index_items WHERE rowid = ANY(%s::bigint[]) ORDER BY rowid",
                               (id_array(rowids),)))

    def item_totals(self) -> tuple[int, int]:
        return self._totals_of("items")

    def context_item_ids_near(self, session: str, low: int, high: int) -> list[int]:
        return [r for (r,) in self._rows("SELECT rowid FROM {s}.index_items WHERE session = %s AND ctx = 1 AND "
                                         "rowid BETWEEN %s AND %s ORDER BY rowid", (session, low, high))]

    def context_item_ids_near_each(self, centres: Sequence[tuple[str, int]], span: int) -> list[list[int]]:
        if self._lookups is not None:
            return self._lookups.context_item_ids_near_each(centres, span)
        return [self.context_item_ids_near(session, rowid - span, rowid + span) for session, rowid in centres]

    # -- session documents

    def session_document_count(self) -> int:
        """From the totals the meta keeps (no statement of its own: every search with session
        context asks it)."""
        return self.session_totals()[0]

    def session_keys(self, sessions: Sequence[str]) -> dict[int, str]:
        return dict(self._rows("SELECT rowid, key FROM {s}.index_sessions WHERE key = ANY(%s) ORDER BY rowid", (list(sessions),)))

    def best_session_scores(self, groups: Sequence[Sequence[str]], limit: int) -> list[list[tuple[str, float]]]:
        """For each group of terms, (key, bm25) of the best session documents holding any of
        them, as FTS5 ranks them (each term's document frequency among the session documents:
        every one holding it is among the rows read); one statement for all the groups."""
        position = {t: i for i, t in enumerate(dict.fromkeys(t for group in groups for t in group))}
        rows = self._matching("index_sessions", list(position), ()) if position else []
        keys, totals = {row[0]: row[2] for row in rows}, self.session_totals()
        found = []
        for group in groups:
            at = [position[t] for t in group]
            held = [(row[0], row[1], row[2], [row[3][i] for i in at]) for row in rows if any(row[3][i] for i in at)]
            phrases = [sum(1 for row in held if row[3][i]) for i in range(len(at))]
            scored = fts5_scores(held, phrases, totals, ())
            scored.sort(key=lambda r: (r[1], r[0]))
            found.append([(keys[rowid], -rank) for rowid, rank in scored[:limit]])
        return found

    def session_bodies(self, rowids: Sequence[int]) -> dict[int, str]:
        return dict(self._rows("SELECT rowid, body FROM {s}.index_sessions WHERE rowid = ANY(%s::bigint[]) "
                               "ORDER BY rowid", (id_array(rowids),)))

    def session_totals(self) -> tuple[int, int]:
        return self._totals_of("sessions")

    def _totals_of(self, table: str) -> tuple[int, int]:
        if table not in self._totals:
            self._totals[table] = (int(self.meta(f"{table}_rows", "0")), int(self.meta(f"{table}_terms", "0")))
        return self._totals[table]

    # -- for `show` on any machine

    def item_text_by_ref(self, ref: str) -> str | None:
        """The (redacted) text of the item `ref` names, this machine's first: a history line's
        number is a line of the all_histories.txt of the machine that indexed it."""
        rows = self._rows("SELECT text FROM {s}.index_items WHERE ref = %s ORDER BY starts_with(source, %s) DESC, "
                          "rowid LIMIT 1", (ref, self.prefix))
        return rows[0][0] if rows else None

    def session_text(self, name: str) -> bytes | None:
        """The compressed text of an archived session, as its zip member holds it."""
        import zlib

        rows = self._rows("SELECT data FROM {s}.session_texts WHERE name = %s", (name,))
        return zlib.decompress(bytes(rows[0][0])) if rows else None


SOURCES_UPSERT = (
    "INSERT INTO {s}.index_sources SELECT * FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::bigint[], "
    "%s::text[], %s::text[]) ON CONFLICT (key) DO UPDATE SET kind = EXCLUDED.kind, size = EXCLUDED.size, "
    "mtime_ns = EXCLUDED.mtime_ns, tail = EXCLUDED.tail, state = EXCLUDED.state RETURNING 1")
META_UPSERT = ("INSERT INTO {s}.index_meta SELECT * FROM unnest(%s::text[], %s::text[]) "
               "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value RETURNING 1")


def _where(terms: Sequence[str], layers: Sequence[str]) -> tuple[str, list]:
    where, params = "tf ?| %s", [list(terms)]
    if layers:
        where += " AND lower(layer) = ANY(%s)"
        params.append([layer.lower() for layer in layers])
    return where, params


def fts5_scores(rows: Sequence[tuple], phrase_hits: Sequence[int], totals: tuple[int, int],
                layers: Sequence[str]) -> list[tuple[int, float]]:
    """(rowid, rank) of each row, rank = -bm25 exactly as SQLite's fts5_aux.c computes it:
    one IDF per phrase (the query's terms, then its layer tokens), the same operations in the
    same order, so the floats agree to the last bit. A row's layer token occurs once in it."""
    row_count, token_count = totals
    average = token_count / row_count if row_count else 1.0
    idfs = fts5_idfs(phrase_hits, row_count)
    wanted = [layer.lower() for layer in layers]
    scored = []
    for rowid, length, label, counts in rows:
        frequencies = list(counts) + [1 if label.lower() == layer else 0 for layer in wanted]
        score = 0.0
        for idf, tf in zip(idfs, frequencies):
            score += idf * ((tf * (K1 + 1.0)) / (tf + K1 * (1 - B + B * length / average)))
        scored.append((rowid, -1.0 * score))
    return scored


def fts5_idfs(phrase_hits: Sequence[int], row_count: int) -> list[float]:
    """One IDF per phrase, as fts5_aux.c computes it (floored at MIN_IDF)."""
    import math

    idfs = []
    for hits in phrase_hits:
        idf = math.log((row_count - hits + 0.5) / (hits + 0.5)) if row_count else 0.0
        idfs.append(MIN_IDF if idf <= 0.0 else idf)
    return idfs


def phrase_counts_sql(terms: Sequence[str], layers: Sequence[str]) -> tuple[str, list]:
    """The columns f0, f1, ... of an index_items row: each phrase's count in it as float8 (the
    query's terms, then its layer tokens: a row's layer token occurs once in it)."""
    counts = ["coalesce((tf->>%s)::int, 0)::float8"] * len(terms)
    counts += ["(CASE WHEN lower(layer) = %s THEN 1 ELSE 0 END)::float8"] * len(layers)
    return ", ".join(f"{count} AS f{i}" for i, count in enumerate(counts)), [*terms, *(x.lower() for x in layers)]


def fts5_rank_sql(idfs: Sequence[float], totals: tuple[int, int]) -> tuple[str, list]:
    """The SQL of fts5_scores' rank over the columns of phrase_counts_sql (one IDF per phrase)
    and `length`, and its parameters: the same IEEE operations in the same order (float8 on the
    server is the same double), so the server's rank equals fts5_scores' to the last bit."""
    row_count, token_count = totals
    average = token_count / row_count if row_count else 1.0
    phrase = "%s::float8 * (({tf} * %s::float8) / ({tf} + %s::float8 * (%s::float8 + %s::float8 * " \
             "length::float8 / %s::float8)))"
    sql, params = "%s::float8", [0.0]
    for number, idf in enumerate(idfs):
        sql = f"({sql} + {phrase.format(tf=f'f{number}')})"
        params += [idf, K1 + 1.0, K1, 1 - B, B, average]
    return f"(%s::float8 * {sql})", [-1.0, *params]
