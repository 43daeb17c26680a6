"""The derived full-text index and everything that builds it: the tokenizer (`text`), what each
layer contributes (`documents`) and the files it reads (`sources`), a refresh (`refresh`), the
rows written by `writer` from documents redacted and tokenized in batches by `prepare` (on every
free core for a big build, counted by `core_sample`), the index's own dictionary (`vocab`), BM25
(`scoring`), the one store a search reads (`store.SQLiteStore`) and its lifecycle (`index`); the
same store on a PostgreSQL server beside it (`pg_store`, `pg_schema`, `pg_writer`, `pg_index`,
`pg_lookups`, `pg_purge`). Imports `core`, `l4` and `longterm` only, never the ranking."""
