"""The ranking weights of a search, read once per search from `[ranking]` in memctl.toml.

Every weight has its default in `memctl.core.config.DEFAULTS["ranking"]`, chosen by
leave-one-out cross-validation over the development sets (bench/retrieval.py --cv; results in
bench/RESULTS.md). A weight of 0 turns its rule off. `[semantic]` (the optional item embeddings)
travels with it, because a search that fuses them needs the model too. `Ranking.for_root` is
what a Searcher uses when it is not handed one; the benchmark's cross-validation hands it
variants directly.
"""

from __future__ import annotations

from collections import namedtuple

from memctl.core.config import DEFAULTS
from memctl.core.errors import ConfigError

FUSIONS = ("rrf", "score", "none")
NORMALISATIONS = ("minmax", "zscore")
_WEIGHTS = DEFAULTS["ranking"]


class Ranking(namedtuple("Ranking", (*_WEIGHTS, "semantic"),
                         defaults=(*_WEIGHTS.values(), tuple(DEFAULTS["semantic"].items())))):
    """session_weight: the item's session as one document (added); session_prior: the same,
    scaling the item's own score; neighbour_weight: the turns before and after a strong match;
    feedback_weight: its session's items about the same things;
    cjk_char_weight: a Chinese query's single characters; piece_backoff: those and the words
    inside a longer query word count only in an item without the longer word;
    aside_weight: the terms only in the sentences around a query's question
    (memctl.recall.ranking.focus); fusion / semantic_weight / rrf_k / semantic_candidates: how item
    embeddings join the lexical ranking (semantic_normalisation: how score fusion rescales the
    cosines); semantic: the [semantic] table as (key, value) pairs."""

    __slots__ = ()

    @classmethod
    def from_settings(cls, settings) -> "Ranking":
        table = settings.values.get("ranking", {})
        semantic = dict(settings.values.get("semantic", DEFAULTS["semantic"]))
        semantic["model"] = model_from_root(str(semantic.get("model") or ""), settings.layout.root)
        ranking = cls(**{name: table.get(name, default) for name, default in _WEIGHTS.items()},
                      semantic=tuple(semantic.items()))
        if ranking.fusion not in FUSIONS:
            raise ConfigError(f"ranking.fusion must be one of {', '.join(FUSIONS)}, got {ranking.fusion!r}")
        if ranking.semantic_normalisation not in NORMALISATIONS:
            raise ConfigError(f"ranking.semantic_normalisation must be one of {', '.join(NORMALISATIONS)}, "
                              f"got {ranking.semantic_normalisation!r}")
        return ranking

    @classmethod
    def for_root(cls, root) -> "Ranking":
        from memctl.core.config import load_settings

        return cls.from_settings(load_settings(root))

    def term_weights(self, terms, asides=frozenset()):
        """memctl.recall.indexing.text.query_term_weights with this search's Chinese piece weights; the
        terms of the query's asides (memctl.recall.ranking.focus) count aside_weight times that; with
        piece_backoff, a Chinese piece counts only in an item that lacks its longer query word
        (memctl.recall.indexing.text.piece_covers)."""
        from memctl.recall.indexing.scoring import TermWeights
        from memctl.recall.indexing.text import piece_covers, query_term_weights

        covers = piece_covers(terms)
        weights = TermWeights(query_term_weights(terms, self.cjk_char_weight),
                              covers if self.piece_backoff else None, asides)
        if asides and self.aside_weight != 1.0:
            for term in asides.intersection(weights):
                weights[term] *= self.aside_weight
        return weights

    def semantic_option(self, key: str):
        return dict(self.semantic).get(key, DEFAULTS["semantic"][key])


def model_from_root(model: str, root) -> str:
    """`[semantic] model` as every process reads it: a relative model directory is taken from the
    memory root, as `[archive] raw_dir` is (not from the working directory, which differs between
    a search and the resident searcher it talks to); a name, an absolute path or none as it is."""
    if not model:
        return model
    import os

    from memctl.recall.embeddings.e5 import NAME

    if model == NAME:
        return model
    expanded = os.path.expanduser(model)
    return expanded if os.path.isabs(expanded) else os.path.join(str(root), expanded)
