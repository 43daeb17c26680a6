"""The weighted BM25 stage: items (and session documents) scored in Python with the query's
term weights (memctl.recall.indexing.text.query_term_weights), so that each piece of a Chinese word
counts for less than the word it belongs to. FTS5's bm25() weighs every term alike; the
formula, agreeing with it, is memctl.recall.indexing.scoring."""

from __future__ import annotations

from memctl.recall.indexing.scoring import idf_weights, score_bodies

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Sequence

    from memctl.recall.ranking.hits import Hit
    from memctl.recall.ranking.ranking import Ranking
    from memctl.recall.indexing.scoring import TermWeights
    from memctl.recall.indexing.store import SQLiteStore


def weigh_terms(store: SQLiteStore, candidates: list[Hit], weights: TermWeights, ranking: Ranking) -> None:
    """The best candidates' bm25 again, in Python, each query term's IDF scaled by its weight
    (`weights`: Ranking.term_weights, the search's [ranking] piece and aside weights); the others
    keep their order below them. Nothing to do when every weight is 1 (an English question)."""
    terms, covers = list(weights), weights.covers
    if all(w == 1.0 for w in weights.values()) and not covers:
        return
    top = sorted(candidates, key=lambda h: -h.score)[:ranking.items_rescored]
    bodies = store.item_bodies([h.rowid for h in top])
    rows, total_terms = store.item_totals()
    if not rows or len(bodies) < len(top):
        return  # the index does not give what the formula needs: the scores so far stand
    scores = score_bodies(bodies.items(), idf(store, terms, weights), total_terms / rows, covers)
    factor = 1.0
    for hit in top:
        old = hit.score
        hit.score = scores.get(hit.rowid, 0.0)
        if old > 0:
            factor = min(factor, hit.score / old)
    rescored = {h.rowid for h in top}
    for hit in candidates:
        if hit.rowid not in rescored:
            hit.score *= factor


def python_bm25(store: SQLiteStore, terms: Sequence[str], rowids: Sequence[int],
                weights: dict[str, float] | None = None, sessions: bool = False,
                covers: dict[str, tuple[str, ...]] | None = None) -> dict[int, float]:
    """bm25 of the given items (or session documents), as FTS5 would score them
    (memctl.recall.indexing.scoring), with the items' IDF for both; `covers`: the pieces that back off
    (TermWeights.covers)."""
    if not rowids:
        return {}
    rows, total_terms = store.session_totals() if sessions else store.item_totals()
    bodies = store.session_bodies(rowids) if sessions else store.item_bodies(rowids)
    return score_bodies(bodies.items(), idf(store, terms, weights), total_terms / rows if rows else 0.0, covers)


def idf(store: SQLiteStore, terms: Sequence[str], weights: dict[str, float] | None = None) -> dict[str, float]:
    """Each term's IDF over the items (the index's own counts), times its query weight."""
    found = idf_weights(store.document_frequencies(list(terms)), store.item_count())
    return {t: w * weights.get(t, 1.0) for t, w in found.items()} if weights else found
