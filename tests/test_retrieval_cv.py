"""The rule selection of bench/retrieval_cv.py: coordinate ascent over the rules, one pass on request.

The folds' scores are a table here (the selection reads nothing else of them), built so that
the two rules interact: the fusion weight that is best with the context share off is not the
one that is best with it on, which a single pass in order cannot see.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from memctl.recall.ranking.ranking import Ranking

BENCH = Path(__file__).resolve().parent.parent / "bench" / "retrieval_cv.py"
RULES = {"semantic_weight": (0.0, (0.0, 0.5, 1.0)), "semantic_context": (0.0, (0.0, 1.0))}
START = Ranking(fusion="score", semantic_weight=0.0, semantic_context=0.0)


def bench_module():
    spec = importlib.util.spec_from_file_location("bench_retrieval_cv", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CV = bench_module()


class TableScores(CV.FoldScores):
    """R@10 per fold from a function of the two rules' values (and of the fold)."""

    def __init__(self, value):
        self.value = value

    def fold_value(self, ranking: Ranking, fold: str) -> float:
        return self.value(ranking.semantic_weight, ranking.semantic_context, fold)


def interacting(weight: float, context: float, fold: str) -> float:
    # context off: weight 0.5 is best (0.5125 against 1.0's 0.51); context on: weight 1.0 is (0.56)
    return 0.5 + 0.04 * weight - 0.03 * weight * weight + 0.05 * weight * context


def chosen(ranking: Ranking) -> tuple[float, float]:
    return ranking.semantic_weight, ranking.semantic_context


def test_coordinate_ascent_chooses_each_rule_again_given_the_others():
    cv = bench_module()
    history = cv.ascend(TableScores(interacting), RULES, ["a", "b"], START, passes=3)
    # pass 1 as before (weight chosen with the context off); pass 2 moves the weight; pass 3 changes nothing
    assert [chosen(r) for r in history] == [(0.5, 1.0), (1.0, 1.0), (1.0, 1.0)]
    assert chosen(cv.select(TableScores(interacting), RULES, ["a", "b"], START)) == (1.0, 1.0)


def test_one_pass_is_the_single_pass_in_order():
    cv = bench_module()
    history = cv.ascend(TableScores(interacting), RULES, ["a", "b"], START, passes=1)
    assert [chosen(r) for r in history] == [(0.5, 1.0)]


def test_a_pass_cap_stops_the_ascent():
    cv = bench_module()
    history = cv.ascend(TableScores(interacting), RULES, ["a", "b"], START, passes=2)
    assert [chosen(r) for r in history] == [(0.5, 1.0), (1.0, 1.0)]


def test_a_value_that_hurts_one_training_fold_is_not_taken_in_any_pass():
    cv = bench_module()

    def hurts_b(weight: float, context: float, fold: str) -> float:
        # weight 1.0 gains fold a 0.2 but costs fold b 0.05 (more than TOLERANCE)
        if weight == 1.0:
            return 0.7 if fold == "a" else 0.45
        return interacting(weight, context, fold)

    history = cv.ascend(TableScores(hurts_b), RULES, ["a", "b"], START, passes=3)
    assert [chosen(r) for r in history] == [(0.5, 1.0), (0.5, 1.0)]


def test_a_tie_stays_with_the_rule_off():
    cv = bench_module()
    flat = TableScores(lambda weight, context, fold: 0.6)
    history = cv.ascend(flat, RULES, ["a", "b"], START._replace(semantic_weight=0.5), passes=3)
    assert [chosen(r) for r in history] == [(0.0, 0.0), (0.0, 0.0)]


class ScaledScores(CV.FoldScores):
    """R@10 per fold where the rescaling sets the weight's scale: z-scores are best at weight 0.5,
    min-max at 1.0, and z-scores at min-max's weight overshoot."""

    def __init__(self, hurt_fold: str = ""):
        self.hurt_fold = hurt_fold

    def fold_value(self, ranking: Ranking, fold: str) -> float:
        best = 0.5 if ranking.semantic_normalisation == "zscore" else 1.0
        top = 0.62 if ranking.semantic_normalisation == "zscore" else 0.60
        if ranking.semantic_normalisation == "zscore" and fold == self.hurt_fold:
            top = 0.55
        return top - 0.2 * abs(ranking.semantic_weight - best)


class QuestionScores(CV.Scores):
    """Per-question R@10 from a table: rule value -> fold -> the questions' recalls."""

    def __init__(self, table: dict, paired: bool = True):
        self.folds, self.cache, self.paired = ["a", "b"], {}, paired
        self.table = table

    def recalls(self, ranking: Ranking) -> dict[str, list[float]]:
        return self.table[ranking.semantic_weight]


def test_a_fall_within_the_noise_of_the_questions_does_not_hurt_a_fold():
    cv = bench_module()
    # 200 questions: fold b loses 0.0125 R@10 on average (more than TOLERANCE), as 17 questions
    # fall by a half and 12 rise by as much (z = -0.93); fold a gains 0.05
    b_off = [0.5] * 200
    b_on = [0.0] * 17 + [1.0] * 12 + [0.5] * 171
    table = {0.0: {"a": [0.5] * 200, "b": b_off}, 1.0: {"a": [0.55] * 200, "b": b_on}}
    scores = QuestionScores(table)
    assert scores.fold_value(START._replace(semantic_weight=1.0), "b") < 0.5 - cv.TOLERANCE
    rules = {"semantic_weight": (0.0, (0.0, 1.0))}
    assert cv.select(scores, rules, ["a", "b"], START).semantic_weight == 1.0
    # the rule before (any fall over TOLERANCE) keeps it out
    assert cv.select(QuestionScores(table, paired=False), rules, ["a", "b"], START).semantic_weight == 0.0
    # the same fall made by every question alike is no noise: the rule is not kept
    table[1.0]["b"] = [0.5 - 0.0125] * 200
    assert cv.select(QuestionScores(table), rules, ["a", "b"], START).semantic_weight == 0.0


def test_a_significant_fall_needs_both_the_tolerance_and_the_test():
    cv = bench_module()
    assert not cv.significant_fall([0.995] * 100, [1.0] * 100)  # certain, but less than TOLERANCE
    assert cv.significant_fall([0.9] * 100, [1.0] * 100)  # every question alike: no noise at all
    noisy = [0.0, 1.0] * 50
    assert not cv.significant_fall(noisy, [0.52] * 100)  # −0.02 on average, ±0.5 a question
    assert cv.significant_fall([0.0] * 30 + [1.0] * 70, [1.0] * 100)
    assert not cv.significant_fall([], [])


OUTER = {"semantic_normalisation": ("minmax", ("zscore",))}
WEIGHTS = {"semantic_weight": (0.0, (0.0, 0.5, 1.0))}


def test_a_rescaling_tried_as_a_coordinate_loses_at_the_old_weight_and_wins_chosen_outside():
    cv = bench_module()
    start = START._replace(semantic_normalisation="minmax")
    inside = cv.select(ScaledScores(), {**WEIGHTS, **OUTER}, ["a", "b"], start)
    assert (inside.semantic_normalisation, inside.semantic_weight) == ("minmax", 1.0)
    outside = cv.select(ScaledScores(), WEIGHTS, ["a", "b"], start, outer=OUTER)
    assert (outside.semantic_normalisation, outside.semantic_weight) == ("zscore", 0.5)


def test_a_rescaling_that_hurts_one_training_fold_is_not_chosen_outside_either():
    cv = bench_module()
    start = START._replace(semantic_normalisation="minmax")
    chosen_ranking = cv.select(ScaledScores(hurt_fold="b"), WEIGHTS, ["a", "b"], start, outer=OUTER)
    assert (chosen_ranking.semantic_normalisation, chosen_ranking.semantic_weight) == ("minmax", 1.0)


class FakeSearcher:
    """The one part of a Searcher the memo wraps: `_lexical`, and the ranking it runs under."""

    def __init__(self):
        self.ranking = Ranking()
        self.calls = 0

    def _lexical(self, terms, filters, k, asked=None):
        self.calls += 1
        return [object()]


def test_the_lexical_memo_serves_the_fusion_variants_and_keeps_a_few_lexical_rankings_only():
    cv = bench_module()
    searcher = FakeSearcher()
    cv.memoize_lexical_stage(searcher)
    searcher._lexical(["a"], None, 10)
    searcher.ranking = searcher.ranking._replace(semantic_weight=0.5, fusion="rrf")  # a fusion variant: memoized
    searcher._lexical(["a"], None, 10)
    assert searcher.calls == 1
    for weight in range(cv.MEMO_RANKINGS + 2):  # lexical variants: each computed once, the oldest let go
        searcher.ranking = Ranking(neighbour_weight=1.0 + weight)  # none is the default 0.3
        searcher._lexical(["a"], None, 10)
    assert searcher.calls == 1 + cv.MEMO_RANKINGS + 2
    closure = searcher._lexical.__closure__
    memo = next(cell.cell_contents for cell in closure if isinstance(cell.cell_contents, dict))
    assert len(memo) == cv.MEMO_RANKINGS
    searcher.ranking = Ranking()  # the first ranking was let go: computed again
    searcher._lexical(["a"], None, 10)
    assert searcher.calls == 2 + cv.MEMO_RANKINGS + 2


def test_a_dataset_held_out_whole_is_scored_with_the_rules_the_others_chose():
    cv = bench_module()

    def fit_to_x(weight: float, context: float, fold: str) -> float:
        # weight 1.0 lifts both folds of dataset X and costs dataset Y's fold beyond noise
        if weight == 1.0:
            return 0.7 if fold in ("x1", "x2") else 0.5
        return 0.6

    class ThreeFolds(TableScores):
        folds = ["x1", "x2", "y1"]

    scores = ThreeFolds(fit_to_x)
    rules = {"semantic_weight": (0.0, (0.0, 1.0))}
    chosen = cv.leave_one_family_out(scores, rules, START, {"X": ["x1", "x2"], "Y": ["y1"]}, passes=1)
    assert chosen["Y"].semantic_weight == 1.0  # chosen on X alone, where every fold agreed with it
    assert chosen["X"].semantic_weight == 0.0  # chosen on Y alone
    assert scores.fold_value(chosen["Y"], "y1") == 0.5


def test_the_on_off_grid_keeps_each_rules_off_value_and_its_default():
    cv = bench_module()
    grid = cv.on_or_off(RULES, START._replace(semantic_weight=0.5))
    assert grid == {"semantic_weight": (0.0, (0.0, 0.5)), "semantic_context": (0.0, (0.0,))}


def test_each_dataset_keeps_its_own_documents_beside_its_memories():
    """The sets handed back after the cross-validation pair every memory with its own documents,
    in every dataset: a zip over one iterator of all the memories once shifted the second dataset
    by one (its BM25 baseline then searched the wrong documents and read 0.000)."""
    sets = {"locomo": [("conv-a", ["doc a"], ["q a"]), ("conv-b", ["doc b"], ["q b"])],
            "memdaily": [("simple/roles", ["doc r"], ["q r"])],
            "longmemeval": [("000/x", ["doc x"], ["q x"]), ("001/y", ["doc y"], ["q y"])]}
    units = [CV.Unit(name, name, dataset, Path(name), questions)
             for dataset, family_sets in sets.items() for name, _, questions in family_sets]
    paired = CV.with_memories(sets, units)
    for dataset, family_sets in sets.items():
        assert [(name, docs, questions, Path(name)) for name, docs, questions in family_sets] == paired[dataset]
