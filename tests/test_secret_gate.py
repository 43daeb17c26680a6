"""memctl.core.secret_gate never passes over a text redact would change.

The gate is cheaper than redact's own prefilter because it only asks for characters and words
that redact's first two steps need: every check's pivot characters are among the gate's, and
every check without one has keywords, all among the gate's words. Then a text the gate rejects
leaves every check at its first two steps, and `find_secrets` finds nothing."""

from __future__ import annotations

import random

import pytest

from memctl.core import redact
from memctl.core.secret_gate import PIVOTS, WORDS, may_hold_secret
from test_redact import PROSE_THAT_STAYS, SHAPES, _corpus


def test_every_check_needs_a_pivot_or_a_gate_word():
    assert redact._PIVOTS == PIVOTS
    for rule, pivots, needles, *_later_steps in redact._CHECKS:
        if pivots:
            assert set(pivots) <= set(PIVOTS), rule.kind
        else:
            assert needles and set(needles) <= set(WORDS), rule.kind
    assert {rule.kind for rule in redact.RULES} == {check[0].kind for check in redact._CHECKS}


def test_the_gate_words_are_lowercase_like_the_text_they_are_found_in():
    assert all(word == word.lower() for word in WORDS)


@pytest.mark.parametrize("name, text, secret", SHAPES)
def test_every_secret_shape_passes_the_gate(name, text, secret):
    assert redact.redact(text) != text
    assert may_hold_secret(text), name


def test_the_gate_agrees_with_redact_over_texts_without_secrets_and_random_ones():
    rng = random.Random(7)
    alphabet = "abcdefghijklmnopqrstuvwxyzABKIASZ0123456789 -_:.=~：İ密码\n"
    texts = [text for _, text in _corpus()] + list(PROSE_THAT_STAYS)
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 60))) for _ in range(3000)]
    texts += ["writer 3 fact 12 about node n00012", "AKİA" + "B" * 16, "bearer " + "x" * 30]
    for text in texts:
        if not may_hold_secret(text):
            assert redact.find_secrets(text) == [], text
    assert any(not may_hold_secret(text) for text in texts)
