"""L5 and L6, long-term memory: the entry store every reader and writer goes through
(`store`; the entry format and JSONL primitives under it in `entries`), type policies (`policies`),
`remember`, `forget`/`restore`/purge (`forget`), the dream pass (`dream`: the public entry;
`dream_plan` the pure planner, `dream_similar` near-duplicate groups, `dream_refs` the
references it folds, `dream_apply` the guard rail and locked steps, `dream_undo` the undo) and
the reference log search hits leave for it (`refs`). Owns `long_term.jsonl`, `archive.jsonl`,
`dream_log.jsonl` and `.memctl/refs.*`. Imports `memctl.core` and, for purges and history
counts, `memctl.l4`."""
