"""A search mode's layer order as a priority (design.md §5: `reply` L5→L4→L2, `earlier` L4→L5 …).

The blend scales each candidate by a small step per layer (memctl.recall.ranking.context.blend), which
only breaks ties: the lines of an L4 session that shares the query's words are lifted by their
session, and pass an L5 fact holding the very same words. With `--mode`, the best hits are put
in order by how much of the query each holds itself (the IDF-weighted share of the query's
terms in its own text), then by the mode's layer order, then by score: a hit of a later layer
goes first only when it holds more of the query.
"""

from __future__ import annotations

from memctl.recall.indexing.scoring import idf_weights

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Sequence

    from memctl.recall.ranking.hits import Hit
    from memctl.recall.indexing.store import SQLiteStore

ORDERED_PER_RESULT = 4  # the best k × this many hits are put in order (their bodies read), the rest follow
SHARE_DIGITS = 2  # shares this close count as holding the query alike


def by_layer_priority(store: SQLiteStore, hits: list[Hit], terms: Sequence[str], layers: Sequence[str],
                      k: int) -> list[Hit]:
    """`hits` (best first) with the first k × ORDERED_PER_RESULT in the mode's order (above)."""
    head = hits[:k * ORDERED_PER_RESULT]
    if len(head) < 2 or not terms:
        return hits
    idf = idf_weights(store.document_frequencies(list(dict.fromkeys(terms))), store.item_count())
    total = sum(idf.values())
    if not total:
        return hits
    bodies = store.item_bodies([hit.rowid for hit in head])
    rank = {layer: at for at, layer in enumerate(layers)}

    def held(hit: Hit) -> float:
        body = set(bodies.get(hit.rowid, "").split()[1:])  # the layer token first, then the terms
        return round(sum(weight for term, weight in idf.items() if term in body) / total, SHARE_DIGITS)

    ordered = sorted(head, key=lambda hit: (-held(hit), rank.get(hit.layer, len(rank)), -hit.score))
    return ordered + hits[len(head):]
