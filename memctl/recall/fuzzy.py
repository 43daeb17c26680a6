"""The typo fallback: a query word the index does not hold is replaced by the closest word the
index has seen written (rapidfuzz's ratio over the `surface` words with the same first letter
and about the same length), which is how a typo still finds its item."""

from __future__ import annotations

from memctl.recall.text import has_cjk

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from memctl.recall.store import SQLiteStore


def closest_term(store: SQLiteStore, word: str, threshold: float) -> str | None:
    """The index term of the surface word closest to a word the index does not hold (a typo)."""
    if len(word) < 4 or has_cjk(word) or not word.isalpha():
        return None
    from rapidfuzz import fuzz, process

    rows = store.surface_words_from(word[0])
    terms = {w: t for w, t in rows if abs(len(w) - len(word)) <= 2}
    best = process.extractOne(word, list(terms), scorer=fuzz.ratio, score_cutoff=threshold)
    if not best:
        return None
    term = terms[best[0]]
    return term if store.document_frequencies([term]).get(term) else None
