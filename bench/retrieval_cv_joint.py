#!/usr/bin/env python3
"""Leave-one-fold-out cross-validation of score fusion with a joint grid instead of
bench/retrieval_cv.py's coordinate ascent (issue #15: tried, not adopted; bench/RESULTS.md).

Every combination of the score-fusion rules' values (retrieval_cv.SEMANTIC_RULES["score"] and
OUTER_RULES["score"], each with its "off" value) is scored once over every fold; each held-out
fold gets the combination with the best mean over the other folds (each fold weighing the same)
among the eligible ones. Eligible by default: every rule earns its keep on every training fold
(turning any one of them off raises no training fold by more than TOLERANCE); with --any-gain:
no training fold worse than fusion off by more than TOLERANCE.

Works on memories kept by an earlier run (`bench/retrieval.py --cv --workdir DIR`), with their
vectors:

    .venv/bin/python bench/retrieval_cv_joint.py locomo DIR [--model multilingual-e5-small] [--any-gain]
    .venv/bin/python bench/retrieval_cv_joint.py memdaily DIR --model multilingual-e5-small
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import retrieval as R
import retrieval_cv as CV

from memctl.core.config import DEFAULTS
from memctl.recall.ranking.ranking import Ranking


def units_of(dataset: str, workdir: Path) -> list:
    if dataset == "locomo":
        sets = list(R.locomo_sets(R.DEFAULT_BENCH / "locomo" / "locomo_dev.json"))
        return CV.build_units(sets, "locomo", CV.FOLD_OF["locomo"], workdir, R.import_memory)
    sets = list(R.memdaily_sets(R.DEFAULT_BENCH / "memdaily" / "memdaily_dev.json"))
    return CV.build_units(sets, "memdaily", CV.FOLD_OF["memdaily"], workdir, R.import_memory)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dataset", choices=("locomo", "memdaily"))
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--model", default="")
    parser.add_argument("--any-gain", action="store_true")
    args = parser.parse_args()
    scores = CV.Scores(units_of(args.dataset, args.workdir))
    CV.memoize_query_vectors()
    folds = scores.folds
    semantic = {**DEFAULTS["semantic"], **({"model": args.model} if args.model else {})}
    base = Ranking(fusion="score", semantic=tuple(semantic.items()))
    rules = {**CV.SEMANTIC_RULES["score"], **CV.OUTER_RULES["score"]}
    grid = {rule: (off, *[v for v in values if v != off]) for rule, (off, values) in rules.items()}
    points = [base._replace(**dict(zip(grid, combo))) for combo in itertools.product(*grid.values())]
    print(f"{len(points)} combinations", file=sys.stderr)

    def value(ranking, fold):
        return scores.fold_value(ranking, fold)

    def eligible(point, train):
        if args.any_gain:
            off = base._replace(fusion="none")
            return all(value(point, f) >= value(off, f) - CV.TOLERANCE for f in train)
        return all(value(point, f) >= value(point._replace(**{rule: off}), f) - CV.TOLERANCE
                   for rule, (off, _) in rules.items() if getattr(point, rule) != off for f in train)

    def choose(train):
        best = None
        for point in points:
            mean = sum(value(point, f) for f in train) / len(train)
            if (best is None or mean > best[0] + 1e-12) and eligible(point, train):
                best = (mean, point)
        return best

    total = count = 0.0
    for held in folds:
        mean, point = choose([f for f in folds if f != held])
        found, n = scores.of(point)[held]
        total, count = total + found, count + n
        print(f"{held:<12} held out: {found / n:.4f} ({found:.2f}/{n})  chosen {CV.describe(point, rules)} "
              f"(training mean {mean:.3f})", flush=True)
    print(f"joint-grid cv R@{CV.K} {total / count:.4f}")
    _, point = choose(folds)
    print(f"chosen on all folds: {CV.describe(point, rules)}: "
          + " ".join(f"{f}:{value(point, f):.3f}" for f in folds))


if __name__ == "__main__":
    main()
