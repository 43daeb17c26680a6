"""The candidates stage: the items worth ranking for a query, with a first score.

A small memory ranks every match with FTS5's bm25(), widening the window until k refs pass
the filters. A large one would pay bm25()'s walk over every match of every common word, so
it takes every item holding a rare query word and the newest holding the common ones, and
scores them in Python (memctl.recall.ranking.rescoring): a cost flat in memory size."""

from __future__ import annotations

from memctl.recall.ranking import tuning
from memctl.recall.ranking.hits import hydrate
from memctl.recall.ranking.query_terms import by_priority
from memctl.recall.ranking.rescoring import python_bm25
from memctl.recall.indexing.text import has_cjk

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Sequence

    from memctl.recall.ranking.filters import Filters
    from memctl.recall.ranking.hits import Hit
    from memctl.recall.indexing.scoring import TermWeights
    from memctl.recall.indexing.store import SQLiteStore


def candidates(store: SQLiteStore, terms: Sequence[str], filters: Filters, k: int,
               weights: TermWeights, common: frozenset[str] = frozenset()) -> tuple[list[Hit], bool]:
    """The items worth ranking, scored, and whether the query's term weights (`weights`:
    Ranking.term_weights) are in the scores already (the large-memory path scores in Python
    with them). `common`: terms held by so many items of a memory of millions that they only
    score what the others gather (memctl.recall.search.QueryPlan.common)."""
    wanted: list[str] = []  # no layer filter when every layer the index holds is wanted
    present_layers = store.present_layers()
    if not set(present_layers) <= set(filters.layers):
        wanted = [layer for layer in filters.layers if layer in present_layers]
        if not wanted:
            return [], True
    limit = max(tuning.MIN_CANDIDATES, k * 20)
    gathering = [t for t in terms if t not in common]
    rankable = rankable_terms(store, gathering, weights.asides)
    if rankable is None and common:  # FTS5's bm25() would walk every match of the common terms
        rankable = gathering
    if rankable is not None:
        return bounded_candidates(store, terms, rankable, wanted, limit, filters, weights, common), True
    while True:
        rows = store.ranked_item_scores(terms, wanted, limit)
        kept = [h for h in hydrate(store, rows) if filters.passes(h)]
        enough = len({h.ref for h in kept}) >= k
        if enough or len(rows) < limit or limit >= tuning.MAX_CANDIDATES:
            return kept, False
        limit *= 4


def rankable_terms(store: SQLiteStore, terms: Sequence[str], asides: frozenset[str] = frozenset()) -> list[str] | None:
    """None when every match can be ranked (small memory, or rare words only); else the
    terms whose matches together stay within the ranking budget: the question's before the
    asides' (memctl.recall.ranking.query_terms), the rarest first."""
    if store.item_count() <= tuning.SMALL_INDEX_ITEMS:
        return None
    dfs = store.document_frequencies(list(terms))
    if sum(dfs.values()) <= tuning.RANK_ALL_LIMIT:
        return None
    rankable, total = [], 0
    for term in by_priority(terms, dfs, asides):  # a term too common for what is left is skipped
        if total + dfs.get(term, 0) <= tuning.RANK_ALL_LIMIT:  # (the question's: an aside may still fit)
            total += dfs.get(term, 0)
            rankable.append(term)
    return rankable


def bounded_candidates(store: SQLiteStore, terms: Sequence[str], rankable: list[str], layers: list[str],
                       limit: int, filters: Filters, weights: TermWeights,
                       common: frozenset[str] = frozenset()) -> list[Hit]:
    """Cost flat in memory size: every item with a rare query word, and the newest items
    with the more common ones (not with the `common` ones: the newest items would be theirs
    alone), are scored by the whole query in Python (memctl.recall.indexing.scoring), each term weighted
    as `weights` says — FTS5's bm25() would first walk every match of every query word."""
    rowids: set[int] = set()
    if rankable:
        rowids.update(store.matching_item_ids(rankable, layers, tuning.MAX_CANDIDATES))
    # single CJK characters are a small memory's fallback; at this size the words suffice
    words = [t for t in terms if not (len(t) == 1 and has_cjk(t))] or list(terms)
    gathering = [t for t in words if t not in common] or words
    if len(rowids) < limit:  # else items with common words only could not reach the top anyway
        rowids.update(store.newest_matching_item_ids(gathering, layers, tuning.NEWEST_MATCHES))
    scores = python_bm25(store, words, sorted(rowids), weights, covers=weights.covers)
    rows = sorted(scores.items(), key=lambda r: -r[1])[:limit]
    return [h for h in hydrate(store, [(rowid, -score) for rowid, score in rows]) if filters.passes(h)]
