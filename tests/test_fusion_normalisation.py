"""Score fusion's rescaling of the cosines ([ranking] semantic_normalisation): min-max, or
z-scores over the query's semantic candidates (memctl.recall.embeddings.semantic._rescaled)."""

from __future__ import annotations

import pytest

from memctl.recall.ranking.hits import Hit
from memctl.recall.ranking.ranking import Ranking
from memctl.recall.embeddings.semantic import Z_SPREAD, _rescaled, _score_fusion
from test_semantic import memory_with_items, search_ids
from test_semantic_context import TURNS, embedded_memory, needs_multilingual

# two queries' cosines over the same five candidates: one best match that stands out, and the same
# order with no match standing out
STANDS_OUT = {1: 0.90, 2: 0.50, 3: 0.48, 4: 0.46, 5: 0.44}
ALIKE = {1: 0.52, 2: 0.50, 3: 0.48, 4: 0.46, 5: 0.44}


def test_min_max_gives_every_query_the_same_spread():
    for cosine in (STANDS_OUT, ALIKE):
        rescaled = _rescaled(cosine, "minmax")
        assert rescaled[1] == pytest.approx(1.0) and rescaled[5] == pytest.approx(0.0)


def test_z_scores_lend_a_match_that_stands_out_more_and_one_below_the_mean_less_than_nothing():
    out, alike = _rescaled(STANDS_OUT, "zscore"), _rescaled(ALIKE, "zscore")
    assert out[1] > 1.3 * alike[1] > 0  # its distance from the mean, in its query's spread (min-max: 1 and 1)
    assert out[5] < 0 and alike[5] < 0
    assert sum(out.values()) == pytest.approx(0.0, abs=1e-9)
    values = list(ALIKE.values())
    mean = sum(values) / len(values)
    deviation = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
    assert alike[1] == pytest.approx((0.52 - mean) / deviation / Z_SPREAD)


def test_all_cosines_equal_or_none_leave_the_lexical_order():
    assert _rescaled({1: 0.5, 2: 0.5}, "zscore") == {1: 0.0, 2: 0.0}
    assert _rescaled({}, "zscore") == {} and _rescaled({}, "minmax") == {}


def test_score_fusion_with_z_scores_puts_a_lexical_match_of_other_meaning_below_a_close_one():
    hits = [Hit(f"L6:{r}", "L6", score, "", "", "", str(r), "s", rowid=r) for r, score in
            ((1, 1.0), (2, 0.9), (3, 0.0), (4, 0.0), (5, 0.0))]
    cosine = {1: 0.40, 2: 0.85, 3: 0.50, 4: 0.45, 5: 0.42}
    _score_fusion(hits, cosine, Ranking(fusion="score", semantic_weight=1.0, semantic_normalisation="zscore"))
    fused = {h.rowid: h.score for h in hits}
    assert fused[2] > fused[1] and fused[1] < 1.0  # below the candidates' mean cosine: it loses


def test_an_unknown_normalisation_is_one_line_and_exit_2(run, root):
    memory_with_items(run, root, [{"id": "a", "text": "alpha beta", "session": "x"}])
    (root / "memctl.toml").write_text('[ranking]\nsemantic_normalisation = "softmax"\n')
    result = run("search", "--layers", "L6", "alpha", root=root)
    assert result.returncode == 2 and len(result.stderr.decode().strip().splitlines()) == 1
    assert b"ranking.semantic_normalisation" in result.stderr and b"Traceback" not in result.stderr


@needs_multilingual
def test_z_scores_through_the_command_line_find_the_reply_by_its_meaning(run, root):
    embedded_memory(run, root)
    (root / "memctl.toml").write_text('[semantic]\nmodel = "multilingual-e5-small"\n[ranking]\nfusion = "score"\n'
                                      'semantic_weight = 1.0\nsemantic_normalisation = "zscore"\n')
    ids, result = search_ids(run, root, "holidays by the sea with the children")
    assert result.returncode == 0, result.stderr
    assert ids[0] in {"ask", "reply"} and "reply" in ids[:2], ids
    assert {t["id"] for t in TURNS} >= set(ids)
