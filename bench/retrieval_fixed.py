"""R@10 per fold at fixed ranking settings, one rule's values side by side (not cross-validated).

Over the memories a `bench/retrieval.py --cv --workdir DIR` run kept (its LoCoMo conversations
or its MemDaily pools), in-process like the cross-validation: the defaults, changed by
`--settings` (a JSON object of [ranking] values), with `--rule` at each of `--values`.

    python bench/retrieval_fixed.py locomo /tmp/at/locomo --rule answer_type_weight --values 0,0.2,0.5
    python bench/retrieval_fixed.py memdaily /tmp/at/memdaily --settings '{"neighbour_weight": 0.45}'
    python bench/retrieval_fixed.py longmemeval /tmp/lme --build --rule aside_weight --values 0.1,0.5,1 --by-type
    python bench/retrieval_fixed.py memdaily /tmp/cv --ablate   # each rule off alone, per type beside BM25
    python bench/retrieval_fixed.py locomo /tmp/cv --variants '{"prior 0.5": {"session_prior": 0.5}}'

`--build` imports the memories a folder lacks (through the command line, as bench/retrieval.py
does). `--by-type` adds R@10 per question type beside the family's plain BM25 (bench/retrieval.py's
baseline), and per value the folds and types where it falls against the first value by more than
noise (retrieval_cv.significant_fall, the cross-validation's paired test): "falls: none" is what
a default must show on every family.

`--large-path N` ranks every memory as one past `tuning.SMALL_INDEX_ITEMS` is ranked (the bounded
candidates of memctl.recall.ranking.candidates with a budget of N matches, session documents as at that
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

from memctl.recall.ranking import tuning  # noqa: E402
from memctl.recall.ranking.ranking import Ranking  # noqa: E402


def take_the_large_path(budget: int, common_terms: bool) -> None:
    tuning.SMALL_INDEX_ITEMS = 0
    tuning.RANK_ALL_LIMIT = budget
    tuning.SMALL_SESSION_DOCS = 0
    if common_terms:
        tuning.COMMON_TERM_MIN_ITEMS = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", choices=sorted(retrieval_cv.FOLD_OF))
    parser.add_argument("workdir", type=Path, help="the --workdir of a bench/retrieval.py --cv --only DATASET run "
                        "(or any folder, with --build)")
    parser.add_argument("--bench-dir", type=Path, default=retrieval.DEFAULT_BENCH)
    parser.add_argument("--settings", type=json.loads, default={}, help="[ranking] values other than the defaults")
    parser.add_argument("--rule", default="answer_type_weight")
    parser.add_argument("--values", default="0,0.1,0.2,0.3,0.5,1.0")
    parser.add_argument("--build", action="store_true", help="import the memories the folder lacks")
    parser.add_argument("--by-type", action="store_true",
                        help="R@10 per question type beside plain BM25, and each value's falls against the first")
    parser.add_argument("--k", type=int, default=retrieval_cv.K, help="R@k instead of R@10")
    parser.add_argument("--below-bm25", action="store_true",
                        help="with --by-type: list the questions the first value ranks below plain BM25")
    parser.add_argument("--ablate", action="store_true",
                        help="instead of --rule: the settings, then each cross-validated rule off alone, per type "
                             "beside BM25 (implies --by-type)")
    parser.add_argument("--model", default="",
                        help="[semantic] model of the ranking (a memory with its vectors is fused: multilingual-e5-small)")
    parser.add_argument("--variants", type=json.loads, default=None,
                        help="instead of --rule: a JSON object, name -> [ranking] values over --settings; each "
                             "beside the settings, per type beside BM25 (implies --by-type)")
    parser.add_argument("--large-path", type=int, metavar="N", default=0,
                        help="rank as a large memory does, with a budget of N matches")
    parser.add_argument("--common-terms", action="store_true",
                        help="with --large-path: treat common terms as a memory of millions does")
    args = parser.parse_args()
    if args.large_path:
        take_the_large_path(args.large_path, args.common_terms)
    retrieval_cv.K = args.k
    family = retrieval.FAMILIES[args.dataset]
    sets = family.load(args.bench_dir)
    units = retrieval_cv.build_units(sets, args.dataset, retrieval_cv.FOLD_OF[args.dataset], args.workdir,
                                     retrieval.import_memory if args.build else None)
    scores = retrieval_cv.Scores(units)
    base = Ranking()._replace(**args.settings)
    if args.model:  # the model's query vectors computed once for every variant
        base = base._replace(semantic=tuple({**dict(base.semantic), "model": args.model}.items()))
        retrieval_cv.memoize_query_vectors()
    path = f", the large-memory path (budget {args.large_path}{', common terms as at millions' * args.common_terms})" \
        if args.large_path else ""
    print(f"{args.dataset}{path}, R@{args.k} at the defaults {json.dumps(args.settings) if args.settings else ''} "
          + ("and with each rule off alone:" if args.ablate else "and its variants:" if args.variants
             else f"with {args.rule} ="))
    if args.ablate:  # the settings, then each rule of the cross-validation turned off alone
        named = {"settings": base, **{f"-{rule}": base._replace(**{rule: off})
                                      for rule, (off, _) in retrieval_cv.LEXICAL_RULES.items()
                                      if getattr(base, rule) != off}}
    elif args.variants:  # the settings, then each variant of them
        named = {"settings": base, **{name: base._replace(**values) for name, values in args.variants.items()}}
    else:
        named = {f"{args.rule}={float(v):g}": base._replace(**{args.rule: float(v)}) for v in args.values.split(",")}
    for name, ranking in named.items():
        folds = " ".join(f"{fold} {scores.fold_value(ranking, fold):.3f}" for fold in scores.folds)
        print(f"  {name}: {folds}  pooled {scores.pooled([(f, ranking) for f in scores.folds]):.4f}", flush=True)
    if args.by_type or args.ablate or args.variants:
        report_types(scores, units, sets, family, named, args.below_bm25)


def per_question(scores, units, ranking) -> list[tuple[str, str, float]]:
    """(fold, question type, R@10) of every question, in the units' order."""
    recalls = {fold: iter(values) for fold, values in scores.recalls(ranking).items()}
    return [(unit.fold, q["category"], next(recalls[unit.fold])) for unit in units for q in unit.questions]


def report_types(scores, units, sets, family, named: dict, below_bm25: bool = False) -> None:
    """R@k per question type of each ranking (`named`: label -> Ranking) beside plain BM25; per
    type, where the first ranking is below BM25 beyond noise; where each other ranking falls
    against the first by more than noise (per fold, per type, the family pooled); `below_bm25`:
    the questions the first ranking ranks below BM25."""
    baseline = {}
    for _, docs, questions in sets:
        ranked = retrieval.run_baseline(docs, questions, family.analyzer, retrieval_cv.K)
        baseline.update({q["qid"]: retrieval.recall(ranked[q["qid"]], q["relevant"], retrieval_cv.K) for q in questions})
    bm25 = [(unit.fold, q["category"], baseline[q["qid"]]) for unit in units for q in unit.questions]
    rows = {family.baseline: bm25, **{name: per_question(scores, units, r) for name, r in named.items()}}
    types = list(dict.fromkeys(t for _, t, _ in bm25))
    print(f"\n{'R@' + str(retrieval_cv.K):<28}" + "".join(f"{t[:18]:>20}" for t in ["overall", *types]))
    print(f"{'questions':<28}" + "".join(f"{n:>20}" for n in [len(bm25), *(sum(1 for _, t, _ in bm25 if t == x) for x in types)]))
    for name, values in rows.items():
        cells = [mean([v for *_, v in values]), *(mean([v for _, t, v in values if t == x]) for x in types)]
        print(f"{name:<28}" + "".join(f"{c:>20.3f}" for c in cells))
    first = list(rows)[1]
    reference = rows[first]
    groups = {"pooled": lambda f, t: True, **{f"fold {x}": (lambda f, t, x=x: f == x) for x in scores.folds},
              **{f"type {x}": (lambda f, t, x=x: t == x) for x in types}}
    below = [f"{label} ({sum(1 for f, t, _ in bm25 if member(f, t))} q, "
             f"{mean([v for f, t, v in reference if member(f, t)]) - mean([v for f, t, v in bm25 if member(f, t)]):+.3f})"
             for label, member in groups.items()
             if retrieval_cv.significant_fall([v for f, t, v in reference if member(f, t)],
                                              [v for f, t, v in bm25 if member(f, t)])]
    lower = [f"{x} ({mean([v for _, t, v in reference if t == x]) - mean([v for _, t, v in bm25 if t == x]):+.3f})"
             for x in types if mean([v for _, t, v in reference if t == x]) < mean([v for _, t, v in bm25 if t == x])]
    print(f"  {first} below {family.baseline} beyond noise: {', '.join(below) or 'none'}; "
          f"below at all: {', '.join(lower) or 'none'}")
    for name, values in list(rows.items())[2:]:
        falls = [label for label, member in groups.items()
                 if retrieval_cv.significant_fall([v for f, t, v in values if member(f, t)],
                                                  [v for f, t, v in reference if member(f, t)])]
        print(f"  {name} against {first}: falls beyond noise: {', '.join(falls) or 'none'}")
    if below_bm25:
        questions = [q for unit in units for q in unit.questions]
        for q, (_, kind, mine), (*_, base) in zip(questions, reference, bm25):
            if mine < base:
                print(f"  below BM25 ({mine:.2f} < {base:.2f}), {kind}: {q['query'][:160]}")


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


if __name__ == "__main__":
    main()
