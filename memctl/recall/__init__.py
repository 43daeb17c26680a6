"""Recall: finding things in every layer, one sub-package a concern. `indexing`: the tokenizer,
the derived SQLite FTS5 index under `.memctl/` and its builders, BM25, the one store a search
reads (`indexing.store.SQLiteStore`) and its PostgreSQL twin. `ranking`: the stages a query
meets, one module each, with their weights from `[ranking]` and their internal bounds.
`embeddings`: the optional item embeddings fused with the ranking. At this level: `search`
(a query run through the stages, in order), `show` and JSON Lines import (`importer`). Reads
every layer's files, writes only the derived index and the item vectors (and, via
`memctl.longterm.refs`, the reference log).
Imports `core`, `l4`, `longterm` and `residents.local_socket` (the resident searcher's client)."""
