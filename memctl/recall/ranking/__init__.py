"""The ranking stages a search runs over the index's candidates, one module a stage, in the
order a query meets them (ARCHITECTURE.md lists them): the question and its asides (`focus`),
identifier parts, stop-word pieces and the terms a cut keeps (`fuzzy`, `query_terms`), a typo's
correction (`fuzzy`), date and type filters (`filters`), the expected answer type (`answer_types`)
and named date (`dated`), the candidates with their BM25 (`candidates`), weighted BM25
(`rescoring`), session context, feedback and neighbours (`context`), a mode's layer order
(`layer_order`), and the hits with how their words were read (`hits`). A search's weights from
`[ranking]` are in `ranking`, the internal bounds in `tuning`. Reads the index only through
`memctl.recall.indexing.store`; `memctl.recall.search` wires the stages together."""
