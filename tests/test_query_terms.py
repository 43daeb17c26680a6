"""Which query terms a search keeps (memctl.recall.ranking.query_terms): when a long query or a large
memory makes it keep fewer, the question's before its asides; never the characters of a
Chinese stop word (the 什 of 什么)."""

from __future__ import annotations

import pytest

from memctl.core.config import Layout
from memctl.recall.ranking import tuning
from memctl.recall.ranking.candidates import rankable_terms
from memctl.recall.ranking.query_terms import by_priority, stop_word_pieces
from memctl.recall.search import SearchRequest, Searcher
from ranking_helpers import import_items, others, own_sessions, ranked_ids


def test_the_question_s_terms_come_before_the_asides_the_rarest_first_within_each():
    dfs = {"key": 40, "signing": 9, "zq1": 1, "zq2": 2, "river": 30}
    assert by_priority(list(dfs), dfs, frozenset({"zq1", "zq2", "river"})) == ["signing", "key", "zq1", "zq2", "river"]
    assert by_priority(list(dfs), dfs, frozenset()) == ["zq1", "zq2", "signing", "river", "key"]


@pytest.mark.parametrize("query, terms, pieces", [
    ("我用的家电是什么呢？", ["我用", "家", "电", "什", "用"], {"什"}),
    ("家电怎么样？", ["家电", "家", "电", "怎", "样"], {"怎", "样"}),
    ("什么样的家电好？", ["什", "样", "家电", "家", "电"], {"什"}),  # 什么样 is no stop word: 样 stays
    ("什锦饭是什么？", ["什锦饭", "什锦", "什", "饭"], set()),  # 什 also stands outside 什么
    ("我上司叫什么来着", ["上司", "上", "司", "什", "来"], {"什", "来"}),
    ("我上司在哪工作", ["上司", "工作"], set()),  # no stop word of two characters
    ("what is it", ["what"], set()),
    ("家电是什么", ["appliance", "什"], {"什"}),  # an alias's term is not in the query: kept
])
def test_a_character_found_only_inside_the_query_s_stop_words_is_a_stop_word_piece(query, terms, pieces):
    assert stop_word_pieces(query, terms) == pieces


# chatter of 70 words each held by one item, then the question: over tuning.MAX_QUERY_TERMS (64)
CHATTER = [f"zq{n}" for n in range(70)]
NOISY = " ".join(CHATTER) + " all came up today. Anyway, where is the signing key?"
LONG_QUERY_ITEMS = own_sessions(target="The signing key is kept in vault seven.") + others(
    *(f"a note about {word}" for word in CHATTER),
    "the signing ceremony ran long", "a signing bonus was paid", "contract signing on friday",
    "the spare key hangs by the door", "a key decision was made", "key figures for the quarter")


def test_a_query_over_the_term_limit_keeps_its_question_s_words_before_its_chatter(run, root):
    import_items(run, root, LONG_QUERY_ITEMS)
    assert len(CHATTER) + 2 > tuning.MAX_QUERY_TERMS
    # the chatter's words are the rarest (one item each), the question's are not: a cut by rarity
    # alone dropped "signing" and "key", and the item that answers was not even a match
    assert ranked_ids(run, root, NOISY)[0] == "target"


def test_a_large_memory_s_ranking_budget_goes_to_the_question_first(run, root, monkeypatch):
    import_items(run, root, LONG_QUERY_ITEMS)
    monkeypatch.setattr(tuning, "SMALL_INDEX_ITEMS", 0)  # the path a memory of millions takes
    monkeypatch.setattr(tuning, "RANK_ALL_LIMIT", 10)  # room for the question's words and a few asides
    monkeypatch.setattr(tuning, "NEWEST_MATCHES", 0)  # only the budget's terms bring candidates
    searcher = Searcher(Layout(root))
    try:
        question = searcher.tokenizer.tokens("signing key")  # stemmed: sign, kei
        terms = [*question, *CHATTER]
        kept = rankable_terms(searcher.store, terms, frozenset(CHATTER))
        assert kept == [*question, "zq0", "zq1"]  # 4 items each, then the asides in what is left
        assert rankable_terms(searcher.store, terms)[:10] == CHATTER[:10]  # rarest first, as before
        hits = searcher.search(SearchRequest(NOISY, k=3, layers=("L6",)))
        assert hits and hits[0].item_id == "target"
    finally:
        searcher.close()


def test_an_item_sharing_only_the_characters_of_the_query_s_stop_words_is_no_match(run, root):
    import_items(run, root, own_sessions(talk="这个周末去哪儿玩，怎么样都行。", appliance="家电是小米的。")
                 + others("我妈妈喜欢下棋", "我同事在杭州"))
    assert ranked_ids(run, root, "我的家电怎么样？") == ["appliance"]
    # a query of stop words alone still searches what it holds
    assert ranked_ids(run, root, "怎么样") == ["talk"]


# a memory of one topic: "phone" is in a third of its items, and still tells the answer from the rest
ONE_TOPIC_ITEMS = own_sessions(target="In Berlin I got my new phone, a Pixel.",
                               coat="In Berlin I got a winter coat.",
                               shoes="In Berlin I got running shoes.") + others(
    *(f"my phone screen cracked on day {n}" for n in range(12)),
    "the phone bill went up", "a phone call with the bank", "phone case in blue",
    *(f"lunch with Sam on day {n}" for n in range(30)))
ONE_TOPIC_QUERY = "which phone did I get in Berlin?"


def test_a_large_memory_s_common_terms_still_score_what_its_rare_terms_find(run, root, monkeypatch):
    import_items(run, root, ONE_TOPIC_ITEMS)
    monkeypatch.setattr(tuning, "SMALL_INDEX_ITEMS", 0)  # the path a memory of millions takes
    monkeypatch.setattr(tuning, "COMMON_TERM_MIN_ITEMS", 0)  # and its common terms, past 10% of the items
    monkeypatch.setattr(tuning, "NEWEST_MATCHES", 0)  # only the rarer terms bring candidates
    searcher = Searcher(Layout(root))
    try:
        plan = searcher.plan(ONE_TOPIC_QUERY, 80)
        assert plan.common == {"phone"} and "phone" in plan.terms
        # "phone" gathers no candidates (its matches are much of the memory), but it scores
        # those "berlin" gathers: the target is first, no longer tied with the coat and the shoes
        hits = searcher.search(SearchRequest(ONE_TOPIC_QUERY, k=3, layers=("L6",)))
        assert [h.item_id for h in hits] == ["target", "coat", "shoes"] or \
            [h.item_id for h in hits] == ["target", "shoes", "coat"]
        assert hits[0].score > hits[1].score
    finally:
        searcher.close()
