"""The expected answer's type (memctl.recall.ranking.answer_types): a "when" / "how old" / "how many"
question favours the items holding a time, an age, a number, in English and in Chinese."""

from __future__ import annotations


import pytest

from memctl.recall.ranking import answer_types
from memctl.recall.ranking.answer_types import AGE, EMAIL, MEASURE, MONEY, NUMBER, PHONE, TIME, expected_answer
from ranking_helpers import import_items, others, own_sessions, ranked_ids


@pytest.mark.parametrize("query, kind", [
    ("When did Caroline go to the LGBTQ support group?", TIME),
    ("What year did Melanie start painting?", TIME),
    ("How long has Caroline had her current group of friends?", TIME),
    ("我上司的生日到底是啥时候呢？", TIME),
    ("你什么时候去的北京", TIME),
    ("How old is Melanie's son?", AGE),
    ("我表弟现在多大了呀？", AGE),
    ("How many children does Melanie have?", NUMBER),
    ("家里有几口人", NUMBER),
    ("How much did the new bike cost?", MONEY),
    ("这双鞋多少钱", MONEY),
    ("我妈妈有多高", MEASURE),
    ("婶婶的电话号码是多少来着？", PHONE),
    ("我上司的邮箱是什么", EMAIL),
])
def test_the_question_names_the_type_of_its_answer(query, kind):
    assert expected_answer(query) is kind


@pytest.mark.parametrize("query", [
    "What did Caroline research?", "Caroline adoption agency", "我的上司是哪个学校毕业的呢？",
    "我住的那个小区叫什么", "", "Whenever I can, I paint",
])
def test_a_question_of_no_recognisable_type_has_none(query):
    assert expected_answer(query) is None


def _covered(items, triggers) -> bool:
    """Whether every match of the parsed pattern `items` holds one of `triggers` (lowercase): some
    run of its literals holds one, or some part every match must have is covered itself."""
    from re import _constants as c

    run = ""
    for op, arg in items:
        if op is c.LITERAL:
            run += chr(arg).lower()
            if any(t in run for t in triggers):
                return True
            continue
        run = ""
        if op is c.SUBPATTERN and _covered(arg[-1], triggers):
            return True
        if op is c.BRANCH and all(_covered(branch, triggers) for branch in arg[1]):
            return True
        if op in (c.MAX_REPEAT, c.MIN_REPEAT) and arg[0] >= 1 and _covered(arg[2], triggers):
            return True
    return False


@pytest.mark.parametrize("asks", [asks for asks, _ in answer_types.QUESTIONS])
def test_every_way_of_asking_holds_a_trigger_word_so_the_prefilter_never_hides_a_type(asks):
    """expected_answer compiles its patterns only for a query holding a trigger word: a question
    pattern with an alternative that holds none would never be tried for that alternative."""
    from re import _parser

    assert _covered(_parser.parse(asks), answer_types._TRIGGERS), asks


def test_the_coverage_check_sees_an_alternative_without_a_trigger():
    from re import _parser

    assert not _covered(_parser.parse(r"(?i:\bwhen\b)|哪个"), ("when",))
    assert _covered(_parser.parse(r"(?i:\be-?mail\b)|(?:电话|号码)是"), ("mail", "话", "码"))


@pytest.mark.parametrize("kind, holds, lacks", [
    (TIME, ["We went camping last weekend.", "I started in 2019.", "It was on Friday.", "我的上司过生日是12月10号。",
            "我们周三见的", "昨天下午去的", "I've known them for 4 years.", "See you May 3", "at 5 pm",
            "a few weeks ago", "It was in March"],
     ["I love painting with my kids.", "我的上司在深圳上班呢。", "May I ask you something?"]),
    (AGE, ["My son is 7 years old.", "我上司都44岁了。", "a 30-year-old man"], ["He is a teacher.", "我表弟是北京人。"]),
    (NUMBER, ["We have 3 kids", "twice a week", "家里有三个孩子"], ["We have kids", "我家有孩子"]),
    (MONEY, ["It cost $120", "about 20 dollars", "这双鞋花了300元"], ["It cost a lot", "这双鞋很贵"]),
    (PHONE, ["我婶婶的电话号码是15522637476。", "Call me at +1 415-555-0100"], ["我婶婶的生日是5月29号。"]),
    (EMAIL, ["我表弟的邮箱地址是zhangwei0715@hospital.com。"], ["我表弟在浙江杭州工作呢。"]),
    (MEASURE, ["我妈妈的身高有172厘米。", "He is 180 cm tall"], ["我妈妈在上海工作呢。"]),
])
def test_each_type_recognises_its_expressions(kind, holds, lacks):
    assert all(kind.search(text) for text in holds), [t for t in holds if not kind.search(t)]
    assert not any(kind.search(text) for text in lacks), [t for t in lacks if kind.search(t)]


def test_an_expression_past_the_first_characters_of_a_long_item_does_not_count():
    assert TIME.search("word " * 10 + "yesterday")
    assert not TIME.search("word " * 1_000 + "yesterday")


ITEMS = own_sessions(  # the same words for the question; only one item says when
    plan="Caroline will go to a support group", talk="Caroline says to go to a support group",
    went="Caroline was at a support group yesterday", zh1="我表弟是北京人，我表弟在杭州工作。", zh2="我的表弟今年36岁。",
) + others("Melanie painted a sunrise", "The budget review moved", "John plays chess", "Anna bakes bread",
            "我妈妈在上海工作", "我同事喜欢下棋")


def test_a_when_question_ranks_the_item_that_says_when_first_only_with_the_rule_on(run, root):
    import_items(run, root, ITEMS)
    plain = "[ranking]\nneighbour_weight = 0\nfeedback_weight = 0\nanswer_type_weight = %s\n"
    (root / "memctl.toml").write_text(plain % 0)
    assert ranked_ids(run, root, "When did Caroline go to the support group?")[0] != "went"
    assert ranked_ids(run, root, "我表弟现在多大了呀？")[0] != "zh2"
    (root / "memctl.toml").write_text(plain % 1.0)
    assert ranked_ids(run, root, "When did Caroline go to the support group?")[0] == "went"
    assert ranked_ids(run, root, "我表弟现在多大了呀？")[0] == "zh2"
    # a question of no type ranks as with the rule off
    (root / "memctl.toml").write_text(plain % 0)
    before = ranked_ids(run, root, "Caroline support group")
    (root / "memctl.toml").write_text(plain % 1.0)
    assert ranked_ids(run, root, "Caroline support group") == before
