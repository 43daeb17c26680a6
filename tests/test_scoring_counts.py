"""`scoring.score_bodies` counts a clean body's terms once into a dict when a query has many
terms (issue #31's in-process search); the scores must be those of the per-term string scan it replaced, bit for bit, on any
body and any terms — odd whitespace, repeated and adjacent terms, pieces backing off to words."""

from __future__ import annotations

import random

import pytest

from memctl.recall.indexing import scoring
from memctl.recall.indexing.scoring import B, K1


def reference(bodies, idf, average_length, covers=None):
    """The scan before this change, kept as the oracle."""
    covers = covers or {}
    needles = [(f" {term} ", f" {term} {term} ", weight, [f" {c} " for c in covers.get(term, ())])
               for term, weight in idf.items()]
    average_length = average_length or 1.0
    scores = {}
    for key, body in bodies:
        if not body:
            continue
        padded = f" {body} "
        norm = K1 * (1 - B + B * (body.count(" ") + 1) / average_length)
        score = 0.0
        for needle, repeated, weight, wholes in needles:
            if wholes and any(whole in padded for whole in wholes):
                continue
            tf = padded.count(needle)
            if tf and repeated in padded:
                tf = padded.split().count(needle.strip())
            if tf:
                score += weight * tf * (K1 + 1) / (tf + norm)
        if score:
            scores[key] = score
    return scores


TOKENS = ["a", "b", "ab", "部署", "部", "署", "缓存", "x1", "a b", "", " a", "b\t", "c\u3000d", "\xa0"]
GLUE = [" ", " ", " ", " ", "  ", "\t", "\n", "\u3000", "\xa0"]


def _body(rng: random.Random) -> str:
    words = [rng.choice(TOKENS[:8]) for _ in range(rng.randint(0, 30))]
    if rng.random() < 0.5:  # a clean body, as the index writes them
        return " ".join(words)
    return "".join(w + rng.choice(GLUE) for w in words).rstrip(rng.choice(["", " ", "x"]))


@pytest.fixture(params=[1, 4, scoring.COUNT_FROM_TERMS], ids=lambda n: f"counted-from-{n}-terms")
def count_from(request, monkeypatch):
    monkeypatch.setattr(scoring, "COUNT_FROM_TERMS", request.param)
    return request.param


def test_the_counts_score_every_body_as_the_scan_did(count_from):
    rng = random.Random(31)
    for _ in range(600):
        terms = rng.sample(TOKENS, rng.randint(1, 6))
        idf = {t: rng.uniform(0.01, 9) for t in terms}
        covers = {t: tuple(rng.sample(TOKENS, rng.randint(1, 2))) for t in terms if rng.random() < 0.3}
        bodies = [(k, _body(rng)) for k in range(20)]
        average = rng.uniform(0, 40)
        assert scoring.score_bodies(bodies, idf, average, covers) == reference(bodies, idf, average, covers)


def test_adjacent_repeats_and_a_piece_backing_off_are_counted_as_before(count_from):
    bodies = [(1, "部署 部署 部署 缓存"), (2, "部 署 部署"), (3, "a  a a"), (4, "a\ta a")]
    idf = {"部署": 2.0, "部": 0.5, "a": 1.0}
    covers = {"部": ("部署",)}
    got = scoring.score_bodies(bodies, idf, 3.0, covers)
    assert got == reference(bodies, idf, 3.0, covers) and set(got) == {1, 2, 3, 4}
