"""Which of a query's terms a search keeps first, and the ones it never keeps.

A long query is cut to its `tuning.MAX_QUERY_TERMS` most telling terms, and on a large memory
its candidates come from the terms whose matches fit the ranking budget
(memctl.recall.ranking.candidates). Both cuts keep the question's terms before its asides
(memctl.recall.ranking.focus), the rarest first within each: a noisy query's chatter holds more rare
words than its question, and took the places of the question's own words in both cuts.

A Chinese stop word that the index does not hold (什么, 怎么样, 来着) is cut by the query's
segmenter (memctl.recall.indexing.vocab) into its characters, which the index does hold (a document's
什么 is dropped as a word, but its characters are indexed like any other); such a character,
found in the query only inside stop words, is not one of the query's terms.
"""

from __future__ import annotations

from memctl.recall.indexing.text import CHINESE_STOP_WORDS, has_cjk

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Collection, Mapping, Sequence

# the longest first, so that 怎么样 is found whole where 怎么 is found too
_CHINESE_STOP_PHRASES = tuple(sorted((w for w in CHINESE_STOP_WORDS if len(w) > 1 and has_cjk(w)),
                                     key=len, reverse=True))


def by_priority(terms: Sequence[str], dfs: Mapping[str, int], asides: Collection[str]) -> list[str]:
    """The terms in the order a cut keeps them: the question's before the asides', the rarest
    first within each (`dfs`: term -> items holding it)."""
    return sorted(terms, key=lambda term: (term in asides, dfs.get(term, 0)))


def stop_word_pieces(query: str, terms: Sequence[str]) -> set[str]:
    """The Chinese terms that occur in the query only inside its stop words (the 什 of 什么):
    a term the query does not hold as it stands (an alias, a typo's replacement) is none."""
    if not has_cjk(query):
        return set()
    inside = _stop_word_spans(query)
    if not any(inside):
        return set()
    return {term for term in terms if has_cjk(term) and _only_inside(query, term, inside)}


def _stop_word_spans(query: str) -> bytearray:
    """1 at each position of the query that a Chinese stop word of two characters or more covers."""
    inside = bytearray(len(query))
    for phrase in _CHINESE_STOP_PHRASES:
        at = query.find(phrase)
        while at >= 0:
            inside[at:at + len(phrase)] = b"\x01" * len(phrase)
            at = query.find(phrase, at + 1)
    return inside


def _only_inside(query: str, term: str, inside: bytearray) -> bool:
    """Whether the term occurs in the query, and every occurrence lies inside stop words."""
    at = query.find(term)
    found = at >= 0
    while at >= 0:
        if not all(inside[at:at + len(term)]):
            return False
        at = query.find(term, at + 1)
    return found
