"""L5 and L6, long-term memory: the JSONL entry store (`entries`), type policies (`policies`),
`remember`, `forget`/`restore`/purge (`forget`), the dream pass (`dream`) and the reference log
search hits leave for it (`refs`). Owns `long_term.jsonl`, `archive.jsonl`, `dream_log.jsonl`
and `.memctl/refs.*`. Imports `memctl.core` and, for purges and history counts, `memctl.l4`."""
