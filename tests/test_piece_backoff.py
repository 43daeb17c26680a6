"""A Chinese query word's pieces back off to it ([ranking] piece_backoff,
memctl.recall.indexing.text.piece_covers): a piece counts only in an item that lacks the word."""

from __future__ import annotations

import pytest

from memctl.recall.ranking.ranking import Ranking
from memctl.recall.indexing.scoring import score_bodies
from memctl.recall.indexing.text import piece_covers
from ranking_helpers import import_items, others, ranked_ids


def test_each_piece_is_covered_by_the_longer_query_words_holding_it():
    covers = piece_covers(["联系电话", "联系", "电话", "联", "话", "13228788707", "人", "bk"])
    assert covers == {"联系": ("联系电话",), "电话": ("联系电话",), "联": ("联系电话", "联系"),
                      "话": ("联系电话", "电话")}
    assert piece_covers(["deploy", "de", "bk-02", "bk"]) == {}  # Latin terms are not pieces


def test_a_body_holding_the_word_scores_it_once_and_one_without_it_scores_its_pieces():
    idf = {"联系电话": 2.0, "联系": 1.0, "电话": 1.0}
    covers = piece_covers(list(idf))
    whole = "我 的 联系电话 联系 电话 是"
    pieces = "我 的 电话 号码 是 联系 方式"
    plain = score_bodies([("w", whole), ("p", pieces)], idf, 6.0)
    backed = score_bodies([("w", whole), ("p", pieces)], idf, 6.0, covers)
    only_word = score_bodies([("w", whole)], {"联系电话": 2.0}, 6.0)
    assert backed["w"] == pytest.approx(only_word["w"])
    assert backed["w"] < plain["w"]
    assert backed["p"] == pytest.approx(plain["p"])


def test_the_weights_carry_the_covers_only_with_the_rule_on():
    terms = ["联系电话", "联系", "电话"]
    assert Ranking(piece_backoff=True).term_weights(terms).covers == piece_covers(terms)
    assert Ranking(piece_backoff=False).term_weights(terms).covers == {}


ITEMS = [
    {"id": "target", "text": "我叔叔的电话是13228788707。", "session": "s0"},
] + [{"id": f"contact{n}", "text": f"{name}的联系电话是1538885404{n}，联系电话随时打。", "session": f"c{n}"}
     for n, name in enumerate(["张伟", "王宇", "李娜", "赵敏", "孙丽", "周杰"])] + others(
    *(f"第{n}次会议讨论了项目{n}的预算" for n in range(200)))  # so that 联系电话 is not common


def test_a_rare_word_of_the_question_outranks_a_common_compound_counted_once(run, root):
    import_items(run, root, ITEMS)
    query = "那个联系电话是13228788707的人是我的谁？"
    settings = "[ranking]\nneighbour_weight = 0\nfeedback_weight = 0\npiece_backoff = %s\n"
    (root / "memctl.toml").write_text(settings % "false")
    assert ranked_ids(run, root, query)[0] != "target"
    (root / "memctl.toml").write_text(settings % "true")
    assert ranked_ids(run, root, query)[0] == "target"
