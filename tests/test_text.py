"""The query side of the tokenizer: how much each term of a query counts."""

from __future__ import annotations

from memctl.recall.indexing.text import CJK_CHAR_WEIGHT, query_term_weights


def test_pieces_of_a_chinese_word_count_their_own_weights():
    weights = query_term_weights(["电话号码", "电话", "号码", "电", "话", "号", "码", "联系人"])
    assert weights["电话号码"] == weights["联系人"] == 1.0
    # a word inside a longer one counts as a word: with piece_backoff only where the longer is missing
    assert weights["电话"] == weights["号码"] == 1.0
    assert weights["电"] == weights["码"] == CJK_CHAR_WEIGHT < 1.0
    weights = query_term_weights(["电话号码", "电话", "电"], char_weight=0.2)
    assert (weights["电话"], weights["电"]) == (1.0, 0.2)


def test_latin_terms_and_identifiers_keep_their_full_weight():
    weights = query_term_weights(["bk-02", "bk", "02", "deploy", "a"])
    assert set(weights.values()) == {1.0}
