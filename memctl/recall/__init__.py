"""Recall: finding things in every layer. The tokenizer (`text`); the derived SQLite FTS5 index
under `.memctl/` (`index`: what each layer contributes in `documents`, the files it reads in
`sources`, a refresh in `refresh`, rows written by `writer` from documents redacted and tokenized in
batches by `prepare` (on every core for a big build), the index's own dictionary in `vocab`), read and written only through `store.SQLiteStore`; BM25 (`scoring`); ranking
(`search`, running the stages `candidates`, `rescoring`, `context`, `fuzzy`, `layer_order`, `filters`, with
their weights from `[ranking]` in `ranking` and their internal bounds in `tuning`); the optional
item embeddings (`encoder`, `vectors`, `semantic`: fused with the ranking); `show` and JSON Lines
import (`importer`). Reads every layer's files, writes only the derived index and the item
vectors (and, via `memctl.longterm.refs`, the reference log).
Imports `core`, `l4` and `longterm`."""
