"""The server tables of the search index (component "recall" of a memory's schema, issue #14).

Step i creates version i+1 (memctl.core.pg.migrate); a step is never edited once released, a
change is a new step. `memctl init` applies them with the entry store's (memctl.ops.server);
a search or refresh creates them when they are missing (the index is derived).

- `index_items`: one row per item: what SQLiteStore's `items` holds, plus its indexed body
  (the layer token, then memctl's terms), its length in terms and its term counts (`tf`);
- `index_sessions`: the session documents, likewise; `index_vocab` (the layer tokens' rows
  count each layer's items), `index_surface`, `index_meta` (the totals bm25 needs; `config`
  and `l4_dir` once per machine), `index_sources` (keys: memctl.recall.indexing.pg_store);
- `session_texts`: each archived session's compressed text (zlib), for `show` anywhere;
- `index_generation` (version 2): one number, bumped by every index write transaction that
  wrote anything, so that a long-lived searcher knows when what it kept is stale
  (memctl.recall.indexing.pg_lookups).
"""

COMPONENT = "recall"

STEPS = (
    """
    CREATE TABLE {schema}.index_meta(key text PRIMARY KEY, value text NOT NULL);
    CREATE TABLE {schema}.index_sources(key text PRIMARY KEY, kind text NOT NULL, size bigint NOT NULL,
        mtime_ns bigint NOT NULL, tail text NOT NULL, state text NOT NULL);
    CREATE INDEX index_sources_kind ON {schema}.index_sources(kind);
    CREATE TABLE {schema}.index_items(rowid bigint PRIMARY KEY, source text NOT NULL, ref text NOT NULL,
        layer text NOT NULL, date text NOT NULL, type text NOT NULL, item_id text NOT NULL,
        session text NOT NULL, ctx integer NOT NULL, text text NOT NULL, body text NOT NULL,
        length integer NOT NULL, tf jsonb NOT NULL);
    CREATE INDEX index_items_source ON {schema}.index_items(source);
    CREATE INDEX index_items_ref ON {schema}.index_items(ref);
    CREATE INDEX index_items_session ON {schema}.index_items(session, rowid) WHERE ctx = 1;
    CREATE INDEX index_items_tf ON {schema}.index_items USING gin(tf);
    CREATE TABLE {schema}.index_sessions(rowid bigint PRIMARY KEY, key text UNIQUE NOT NULL, body text,
        length integer, tf jsonb);
    CREATE INDEX index_sessions_tf ON {schema}.index_sessions USING gin(tf);
    CREATE TABLE {schema}.index_vocab(term text COLLATE "C" PRIMARY KEY, df integer NOT NULL);
    CREATE TABLE {schema}.index_surface(word text COLLATE "C" PRIMARY KEY, term text NOT NULL);
    CREATE TABLE {schema}.session_texts(name text PRIMARY KEY, source text NOT NULL, data bytea NOT NULL);
    CREATE INDEX session_texts_source ON {schema}.session_texts(source);
    """,
    """
    CREATE TABLE {schema}.index_generation(only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
        value bigint NOT NULL);
    INSERT INTO {schema}.index_generation(value) VALUES (0);
    """,
)


