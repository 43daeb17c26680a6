"""The question a query asks (memctl.recall.ranking.focus): in a query of several sentences the terms
only in the sentences around its last question count aside_weight, in English and Chinese."""

from __future__ import annotations

import pytest

from memctl.core.config import Layout
from memctl.recall import search as search_module
from memctl.recall.ranking.focus import Focus, aside_terms, question_focus
from memctl.recall.ranking.ranking import Ranking
from memctl.recall.search import SearchRequest, Searcher
from ranking_helpers import import_items, others, own_sessions, ranked_ids


@pytest.mark.parametrize("query, question, asides", [
    ("Fixed the build yesterday. Anyway, where did we keep the signing key?",
     "Anyway, where did we keep the signing key?", "Fixed the build yesterday."),
    ("今天天气真好。下次要不要试试看呢？对了，我真正想问的是：我上司在哪工作？",  # the last that asks
     "对了，我真正想问的是：我上司在哪工作？", "今天天气真好。 下次要不要试试看呢？"),
    ("我上司在哪工作？谢谢。", "我上司在哪工作？", "谢谢。"),  # context after the question too
    ("Where is v1.2 deployed? It moved last week.", "Where is v1.2 deployed?", "It moved last week."),
    ("What did she say about Rome?!\nI forgot.", "What did she say about Rome?!", "I forgot."),
    ("notes\n\nwhere is the key kept?", "where is the key kept?", "notes"),
])
def test_the_last_sentence_that_asks_is_the_question(query, question, asides):
    assert question_focus(query) == Focus(question, asides)


@pytest.mark.parametrize("query", [
    "Where did we keep the signing key?",  # one sentence
    "我上司在哪工作",  # asks nothing that a question mark tells
    "The build broke. The signing key moved.",  # several sentences, no question
    'He wrote "why?" on the board and left.',  # a question mark that ends no sentence
    "他说“为什么？”然后走了。",
    "v1.2 or v1.3? ",
    "",
    # a question naming fewer than two things points back at its context (LongMemEval's style)
    "I mentioned cooking something for my friend a couple of days ago. What was it?",
    "I'm planning a trip to Denver soon. Any suggestions on what to do there?",
    "今天天气好。他是谁？",
])
def test_a_query_without_a_question_among_other_sentences_has_no_focus(query):
    assert question_focus(query) is None


def test_the_asides_are_the_terms_the_question_does_not_hold():
    focus = question_focus("The key moved to vault. Where is the key kept?")
    assert aside_terms(focus, lambda text: text.lower().replace("?", "").replace(".", "").split()) == \
        frozenset({"moved", "to", "vault"})
    assert aside_terms(None, str.split) == frozenset()


def test_the_asides_count_aside_weight_times_their_own_weight():
    terms = ["电话号码", "电话", "天气", "key"]
    plain = Ranking().term_weights(terms)
    weighted = Ranking(aside_weight=0.5).term_weights(terms, frozenset({"天气", "key", "absent"}))
    assert weighted == {**plain, "天气": plain["天气"] * 0.5, "key": 0.5}
    assert Ranking(aside_weight=1.0).term_weights(terms, frozenset({"天气"})) == plain


ITEMS = own_sessions(**{
    "target": "My boss works at the harbour office in Leith.", "chatter": "Lovely sunny weather at the river.",
    "zh-target": "我上司在深圳工作。", "zh-chatter": "今天天气真好，阳光明媚，适合出去散步，和朋友吃饭。",
}) + others("Melanie painted a sunrise", "The budget review moved", "John plays chess", "我妈妈喜欢下棋",
            "我同事在杭州", "我上司很忙")
NOISY_EN = "Lovely sunny weather by the river today. Anyway, where does my boss work?"
NOISY_ZH = "今天天气真好，阳光明媚，适合出去散步，和朋友吃饭。对了，我真正想问的是：我上司在哪工作？"


def test_the_question_outranks_the_chatter_before_it_only_with_the_rule_on(run, root):
    import_items(run, root, ITEMS)
    plain = "[ranking]\nneighbour_weight = 0\nfeedback_weight = 0\naside_weight = %s\n"
    (root / "memctl.toml").write_text(plain % 1.0)  # off: every term alike, the chatter wins
    assert ranked_ids(run, root, NOISY_EN)[0] == "chatter"
    assert ranked_ids(run, root, NOISY_ZH)[0] == "zh-chatter"
    (root / "memctl.toml").write_text(plain % 0.3)
    assert ranked_ids(run, root, NOISY_EN)[0] == "target"
    assert ranked_ids(run, root, NOISY_ZH)[0] == "zh-target"
    # a query of one sentence ranks as with the rule off
    before = ranked_ids(run, root, "where does my boss work?")
    (root / "memctl.toml").write_text(plain % 1.0)
    assert ranked_ids(run, root, "where does my boss work?") == before


def test_a_question_that_names_nothing_of_its_own_is_searched_with_its_context(run, root):
    """`Any suggestions on what to do there?` asks about the trip the sentence before names: with
    the split, `suggestions` alone counted fully and the essay's item came first (issue #33)."""
    import_items(run, root, own_sessions(denver="Booked the Denver trip for May, flights and a hotel downtown.",
                                         essay="Thanks for the suggestions on my essay draft.")
                 + others("Melanie painted a sunrise", "John plays chess", "The budget review moved"))
    (root / "memctl.toml").write_text("[ranking]\naside_weight = 0.1\n")
    query = "I'm planning a trip to Denver soon. Any suggestions on what to do there?"
    assert ranked_ids(run, root, query)[0] == "denver"


def test_the_answer_type_is_read_from_the_question_not_the_asides(run, root, monkeypatch):
    import_items(run, root, ITEMS)
    asked = []
    monkeypatch.setattr(search_module, "expected_answer", lambda text: asked.append(text))
    searcher = Searcher(Layout(root))
    try:
        searcher.search(SearchRequest("When did we last talk? Never mind. Where does my boss work?", layers=("L6",)))
        searcher.ranking = searcher.ranking._replace(aside_weight=1.0)
        searcher.search(SearchRequest("When did we last talk? Where does my boss work?", layers=("L6",)))
    finally:
        searcher.close()
    assert asked == ["Where does my boss work?", "When did we last talk? Where does my boss work?"]


def test_only_the_question_is_embedded_while_the_asides_count_for_less():
    from memctl.recall.embeddings.semantic import embedded_text

    noisy = "Lovely weather today. Anyway, where does my boss work?"
    assert embedded_text(noisy, Ranking()) == "Anyway, where does my boss work?"
    assert embedded_text(noisy, Ranking(aside_weight=1.0)) == noisy
    assert embedded_text("where does my boss work?", Ranking()) == "where does my boss work?"


@pytest.mark.parametrize("value", ["2", "-0.5", '"much"'])
def test_an_aside_weight_outside_0_to_1_is_refused_in_one_line(run, root, value):
    assert run("init", root=root).returncode == 0
    (root / "memctl.toml").write_text(f"[ranking]\naside_weight = {value}\n")
    result = run("search", "The key moved. Where is it?", root=root)
    assert result.returncode == 2
    message = result.stderr.decode().strip()
    assert "ranking.aside_weight" in message and len(message.splitlines()) == 1 and "Error" not in message
