"""R@10 per fold at fixed ranking settings, one rule's values side by side (not cross-validated).

Over the memories a `bench/retrieval.py --cv --workdir DIR` run kept (its LoCoMo conversations
or its MemDaily pools), in-process like the cross-validation: the defaults, changed by
`--settings` (a JSON object of [ranking] values), with `--rule` at each of `--values`.

    python bench/retrieval_fixed.py locomo /tmp/at/locomo --rule answer_type_weight --values 0,0.2,0.5
    python bench/retrieval_fixed.py memdaily /tmp/at/memdaily --settings '{"neighbour_weight": 0.45}'

`--large-path N` ranks every memory as one past `tuning.SMALL_INDEX_ITEMS` is ranked (the bounded
candidates of memctl.recall.candidates with a budget of N matches, session documents as at that
size), so that the path a memory of millions takes is measured on these questions: the
development pools hold 300-900 items, and a budget of a tenth of that is the share the defaults
give 20,000 items (2,000). `--common-terms` also treats a query's terms held by more than
`tuning.COMMON_TERM_SHARE` of the items as a memory past `COMMON_TERM_MIN_ITEMS` does (they
score the candidates but gather none; before this was measured they were dropped); a pool
speaks of one topic (every item of `roles` of people), so a term's share of it overstates its
share of a real memory of millions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import retrieval  # noqa: E402  (bench/ on the path first)
import retrieval_cv  # noqa: E402

from memctl.recall import tuning  # noqa: E402
from memctl.recall.ranking import Ranking  # noqa: E402


def take_the_large_path(budget: int, common_terms: bool) -> None:
    tuning.SMALL_INDEX_ITEMS = 0
    tuning.RANK_ALL_LIMIT = budget
    tuning.SMALL_SESSION_DOCS = 0
    if common_terms:
        tuning.COMMON_TERM_MIN_ITEMS = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", choices=sorted(retrieval_cv.FOLD_OF))
    parser.add_argument("workdir", type=Path, help="the --workdir of a bench/retrieval.py --cv --only DATASET run")
    parser.add_argument("--bench-dir", type=Path, default=retrieval.DEFAULT_BENCH)
    parser.add_argument("--settings", type=json.loads, default={}, help="[ranking] values other than the defaults")
    parser.add_argument("--rule", default="answer_type_weight")
    parser.add_argument("--values", default="0,0.1,0.2,0.3,0.5,1.0")
    parser.add_argument("--large-path", type=int, metavar="N", default=0,
                        help="rank as a large memory does, with a budget of N matches")
    parser.add_argument("--common-terms", action="store_true",
                        help="with --large-path: treat common terms as a memory of millions does")
    args = parser.parse_args()
    if args.large_path:
        take_the_large_path(args.large_path, args.common_terms)
    if args.dataset == "locomo":
        sets = retrieval.locomo_sets(args.bench_dir / "locomo" / "locomo_dev.json")
    else:
        sets = retrieval.memdaily_sets(args.bench_dir / "memdaily" / "memdaily_dev.json")
    units = retrieval_cv.build_units(sets, args.dataset, retrieval_cv.FOLD_OF[args.dataset], args.workdir, None)
    scores = retrieval_cv.Scores(units)
    base = Ranking()._replace(**args.settings)
    path = f", the large-memory path (budget {args.large_path}{', common terms as at millions' * args.common_terms})" \
        if args.large_path else ""
    print(f"{args.dataset}{path}, R@10 at the defaults {json.dumps(args.settings) if args.settings else ''} "
          f"with {args.rule} =")
    for value in (float(v) for v in args.values.split(",")):
        ranking = base._replace(**{args.rule: value})
        folds = " ".join(f"{fold} {scores.fold_value(ranking, fold):.3f}" for fold in scores.folds)
        print(f"  {value:g}: {folds}  pooled {scores.pooled([(f, ranking) for f in scores.folds]):.4f}", flush=True)


if __name__ == "__main__":
    main()
