"""The fallbacks for a query word the index does not hold: a typo's closest written word, then
the written words it begins, then those it is inside.

A typo is replaced by the closest word the index has seen written (rapidfuzz's ratio over the
`surface` words with the same first letter and about the same length). A word no typo explains
is taken as the start of a word (`cert` for `certificate`, `SignatureDoes` for
`SignatureDoesNotMatch`), then as a piece of one (`DoesNotMatch`): the keyword fallback of a
word half remembered. Only plain words fall back: a word with digits or joined by `-`, `.` or
`_` (`bk-03`, `v2.1`, `ERR_42`) names one thing, and a different identifier is a different
thing, not a spelling of it (and the surface table holds letters-only words alone, so no
fallback ever answers with an identifier).
"""

from __future__ import annotations

from memctl.recall.indexing.text import has_cjk

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from memctl.recall.indexing.store import SQLiteStore

MIN_PREFIX = 3  # `cer` still narrows the words; two letters would take whatever starts so
MIN_PIECE = 4  # a piece inside a word: shorter ones are inside too many words to mean one
MAX_COMPLETIONS = 5  # the written words a prefix or a piece stands for, the most used first
PIECE_SCAN_LIMIT = 2000  # surface rows a piece is looked for in at most (the table is scanned)
COMPLETED_WORDS = 4  # a query's words widened at most: each may scan the surface table once
LONGEST_COMPLETED = 64  # letters; a longer "word" is pasted text, not the start of a word


class Fallback:
    """What a word the index does not hold is searched as: the written words (`shown`, as a
    reader would type them) and their index terms; `typo` when it was a typo's correction."""

    __slots__ = ("shown", "terms", "typo")

    def __init__(self, shown: list[str], terms: list[str], typo: bool):
        self.shown, self.terms, self.typo = shown, terms, typo


def plain_word(word: str) -> bool:
    """Whether a query word may fall back: letters only, and not Chinese."""
    return word.isalpha() and not has_cjk(word)


def fall_back(store: SQLiteStore, word: str, threshold: float, completions: bool) -> Fallback | None:
    """The typo's correction, else (with `completions`) the words `word` begins, else those it
    is inside; None for a word that is not plain (`plain_word`) or that nothing written resembles."""
    word = word.lower()
    if not plain_word(word):
        return None
    typo = closest_word(store, word, threshold)
    if typo is not None:
        return Fallback([typo[0]], [typo[1]], typo=True)
    if not completions or len(word) > LONGEST_COMPLETED:
        return None
    rows = []
    if len(word) >= MIN_PREFIX:
        rows = [(w, t) for w, t in store.surface_words_from(word[0]) if w.startswith(word) and w != word]
    if not rows and len(word) >= MIN_PIECE:
        rows = [(w, t) for w, t in store.surface_words_containing(word, PIECE_SCAN_LIMIT) if w != word]
    return _most_used(store, rows)


def unheld_identifier_parts(groups, dfs) -> set[str]:
    """The parts of the query's identifiers that the index does not hold whole (`bk`, `03` of
    `bk-03` when only bk-02 is written), less the terms another query word gives too: searched,
    they would find a different identifier. `groups`: (surface word, its terms: the whole
    identifier first, then its parts) as the tokenizer gives them; `dfs`: term -> items."""
    parts, others = set(), set()
    for surface, terms in groups:
        if len(terms) > 1 and identifier(surface) and not dfs.get(terms[0]):
            parts.update(terms[1:])
        else:
            others.update(terms)
    return parts - others


def identifier(word: str) -> bool:
    """A word with a digit or an underscore in it (`bk-03`, `v2.1`, `ERR_42`, `sk_live`)."""
    return "_" in word or any(c.isdigit() for c in word)


def closest_word(store: SQLiteStore, word: str, threshold: float) -> tuple[str, str] | None:
    """(surface word, index term) closest to a plain word the index does not hold (a typo)."""
    if len(word) < 4:
        return None
    from rapidfuzz import fuzz, process

    terms = {w: t for w, t in store.surface_words_from(word[0]) if abs(len(w) - len(word)) <= 2}
    best = process.extractOne(word, list(terms), scorer=fuzz.ratio, score_cutoff=threshold)
    if not best:
        return None
    term = terms[best[0]]
    return (best[0], term) if store.document_frequencies([term]).get(term) else None


def _most_used(store: SQLiteStore, rows: list[tuple[str, str]]) -> Fallback | None:
    """The MAX_COMPLETIONS written words whose terms the most items hold (terms no item holds
    any more left out), most first."""
    if not rows:
        return None
    dfs = store.document_frequencies(sorted({t for _, t in rows}))
    ranked = sorted((w_t for w_t in rows if dfs.get(w_t[1])), key=lambda w_t: (-dfs[w_t[1]], w_t[0]))
    shown, terms = [], []
    for word, term in ranked:
        if len(shown) == MAX_COMPLETIONS:
            break
        shown.append(word)
        if term not in terms:
            terms.append(term)
    return Fallback(shown, terms, typo=False) if shown else None
