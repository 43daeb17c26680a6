"""Recall: finding things in every layer. The tokenizer (`text`), the derived SQLite FTS5 index
under `.memctl/` (`index`), BM25 scoring (`scoring`), ranking (`search`) and JSON Lines import
(`importer`). Reads every layer's files, writes only the derived index (and, via
`memctl.longterm.refs`, the reference log). Imports `core`, `l4` and `longterm`."""
