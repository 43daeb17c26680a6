"""The session context stages: what an item's session and its neighbours add to its score.

- session scores: each candidate's session as one document (all its items' terms), scored
  by bm25 relative to the best session, so an item whose session as a whole matches the
  query ranks higher (`blend` adds session_weight of it to the item's own score);
- session feedback: items of a strong match's session that share what the match holds
  beyond the query share in its score;
- neighbours: the turns right before and after a strong match share in its score (the answer
  often follows the turn that asks).

Items brought in by the last two pass the same filters as the candidates. The weights are the
search's `[ranking]` (memctl.recall.ranking.ranking.Ranking); a weight of 0 turns its stage off."""

from __future__ import annotations

from memctl.recall.ranking import tuning
from memctl.recall.ranking.hits import hydrate
from memctl.recall.ranking.rescoring import python_bm25
from memctl.recall.indexing.scoring import idf_weights

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Sequence

    from memctl.recall.ranking.filters import Filters
    from memctl.recall.ranking.hits import Hit
    from memctl.recall.ranking.ranking import Ranking
    from memctl.recall.indexing.store import SQLiteStore


def session_scores(store: SQLiteStore, weights: dict[str, float], sessions: list[str],
                   ranking: Ranking) -> dict[str, float]:
    """bm25 of each candidate's session as one document, relative to the best session (the
    query's terms weighted as for items: `weights`, Ranking.term_weights)."""
    if not sessions or not (ranking.session_weight or ranking.session_prior):  # 0: no session-document statements
        return {}
    if store.session_document_count() <= tuning.SMALL_SESSION_DOCS:
        rows = weighted_session_rows(store, weights)
    else:  # many sessions: score only the candidates' own, in Python (see bounded_candidates), without
        # the back-off, as the statements above
        wanted = list(sessions)[:tuning.SESSIONS_SCORED]
        keys = store.session_keys(wanted)
        rows = [(keys[rowid], score) for rowid, score in
                python_bm25(store, list(weights), sorted(keys), weights, sessions=True).items()]
    if not rows:
        return {}
    best = max(score for _, score in rows) or 1.0
    return {key: score / best for key, score in rows}


def weighted_session_rows(store: SQLiteStore, weights: dict[str, float]) -> list[tuple[str, float]]:
    """The best session documents' bm25, each query term weighted as for items. FTS5's bm25 is
    a sum over the query's terms, so one group per weight (one for an English question, up to
    three for a Chinese one, twice that with asides) adds up to it: an FTS5 statement a group, one
    statement for all of them on a server. A sum cannot leave a piece out where its word is, so
    session documents are scored without piece_backoff on both paths."""
    groups: dict[float, list[str]] = {}
    for term, weight in weights.items():
        groups.setdefault(weight, []).append(term)
    totals: dict[str, float] = {}
    for weight, best in zip(groups, store.best_session_scores(list(groups.values()), tuning.SESSIONS_RANKED)):
        for key, score in best:
            totals[key] = totals.get(key, 0.0) + weight * score
    return list(totals.items())


def blend(candidates: list[Hit], sessions: dict[str, float], layers: Sequence[str], ranking: Ranking) -> None:
    """Score = item bm25 (relative to the best candidate) × (1 + session_prior × its session's)
    + session_weight × its session's, times the mode's layer priority (its first layer wins ties
    over its second, and so on). The prior scales what the item matches itself, so a session
    that matches the query as a whole lifts its matching items without lifting its weak ones
    over other sessions' strong ones, as the added session_weight does."""
    priority = {layer: 1.0 - tuning.LAYER_PRIORITY_STEP * i for i, layer in enumerate(layers)}
    best_item = max(c.score for c in candidates) or 1.0
    for hit in candidates:
        item_part = hit.score / best_item
        session_part = sessions.get(hit.session, 0.0)
        if not hit.session or not hit.in_context:  # it is (also) its own one-item session
            session_part = max(session_part, item_part)
        blended = item_part * (1.0 + ranking.session_prior * session_part) + ranking.session_weight * session_part
        hit.score = blended * priority.get(hit.layer, 1.0)


def with_session_feedback(store: SQLiteStore, candidates: list[Hit], terms: Sequence[str],
                          filters: Filters, ranking: Ranking) -> list[Hit]:
    """Items of a strong match's session that share what the match holds beyond the query
    share in its score: asked "the one whose phone is 136…, what are their hobbies?", the
    match "我上司的电话是136…" lends its score to "我的上司喜欢攀岩" (both about 我上司), which
    holds no query word, and not to the rest of the session. The share is the IDF-weighted
    part of the match's other terms the item also has. Only the best feedback_sources
    matches lend, to the items within feedback_span rows of them: bounded work."""
    if ranking.feedback_weight <= 0:
        return candidates
    by_rowid = {h.rowid: h for h in candidates}
    sources = sorted((h for h in candidates if h.session and h.in_context), key=lambda h: -h.score)
    sources = sources[:ranking.feedback_sources]
    related = _near_in_session(store, sources, ranking.feedback_span)
    if not related:
        return candidates
    for hit in hydrate(store, [(r, 0.0) for r in related if r not in by_rowid], context_only=True):
        if filters.admits(hit):
            hit.score = 0.0
            by_rowid[hit.rowid] = hit
    bodies = {r: set(b.split()[1:]) for r, b in store.item_bodies([*related, *(s.rowid for s in sources)]).items()}
    query = set(terms)
    beyond = {s.rowid: bodies.get(s.rowid, set()) - query for s in sources}
    idf = idf_weights(store.document_frequencies(sorted(set().union(*beyond.values()))), store.item_count())
    lent = {s.rowid: s.score for s in sources}
    for rowid, lenders in related.items():
        hit = by_rowid.get(rowid)
        if hit is None:
            continue
        best = 0.0
        for source in lenders:
            own = beyond[source.rowid]
            whole = sum(idf.get(t, 0.0) for t in own)
            if whole > 0:
                shared = sum(idf.get(t, 0.0) for t in own & bodies.get(rowid, set()))
                best = max(best, lent[source.rowid] * shared / whole)
        hit.score += ranking.feedback_weight * best
    return [h for h in by_rowid.values() if h.score > 0]


def _near_in_session(store: SQLiteStore, sources: list[Hit], span: int) -> dict[int, list[Hit]]:
    """rowid -> the sources it lies within `span` rows of, in the source's session."""
    related: dict[int, list[Hit]] = {}
    nearby = store.context_item_ids_near_each([(s.session, s.rowid) for s in sources], span) if sources else []
    for source, rowids in zip(sources, nearby):
        for rowid in rowids:
            if rowid != source.rowid:
                related.setdefault(rowid, []).append(source)
    return related


def with_neighbours(store: SQLiteStore, candidates: list[Hit], filters: Filters, ranking: Ranking) -> list[Hit]:
    """Conversation turns next to a strong match share in its score (the answer often
    follows the turn that asks); adjacent means the next or previous item of the same session."""
    if ranking.neighbour_weight <= 0:
        return candidates
    by_rowid = {h.rowid: h for h in candidates}
    top = sorted((h for h in candidates if h.session), key=lambda h: -h.score)[:ranking.neighbour_sources]
    wanted = {r: h.session for h in top for r in (h.rowid - 1, h.rowid + 1)}
    missing = [(r, 0.0) for r in wanted if r not in by_rowid]
    for hit in hydrate(store, missing, context_only=True):
        if hit.session == wanted[hit.rowid] and filters.admits(hit):
            hit.score = 0.0
            by_rowid[hit.rowid] = hit
    base = {rowid: h.score for rowid, h in by_rowid.items()}
    for rowid, hit in by_rowid.items():
        if not hit.session:
            continue
        near = [base[r] for r in (rowid - 1, rowid + 1) if r in by_rowid and by_rowid[r].session == hit.session]
        if near:
            hit.score += ranking.neighbour_weight * max(near)
    return [h for h in by_rowid.values() if h.score > 0]
