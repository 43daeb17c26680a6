"""What the model adds to a family, fold by fold: R@10 lexical, fused and by the model alone, and
how many of the fused top ten the model brought in (issue #33: why the multilingual model adds
~nothing on unseen Chinese).

Over the memories of a `bench/retrieval.py --cv --workdir DIR` run with item vectors (`memctl
index embed` with `[semantic] model = MODEL`), in-process like bench/retrieval_fixed.py. Per
ranking (`--variants`: name -> [ranking] values over the defaults with MODEL; the lexical one,
the defaults fused and the model almost alone always come first) and fold:

- R@10;
- model-only: per query, how many of the fused top ten were no lexical candidate (the items the
  model alone brought in), and how many of those were evidence;
- reach: the share of the evidence that is a lexical candidate at all, and that is among the
  model's nearest (`semantic_candidates`) — what fusion can reorder, and what only the model finds.

    python bench/retrieval_fusion.py memdaily /tmp/cv --model multilingual-e5-small \\
        --variants '{"w1": {"semantic_weight": 1.0}}'
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import retrieval  # noqa: E402  (bench/ on the path first)
import retrieval_cv  # noqa: E402

from memctl.core.config import DEFAULTS, Layout  # noqa: E402
from memctl.recall.embeddings import semantic as semantic_signal  # noqa: E402
from memctl.recall.ranking.ranking import Ranking  # noqa: E402
from memctl.recall.search import SearchRequest  # noqa: E402

ALONE = 100.0  # a semantic_weight at which the lexical score only breaks the model's ties


class Recorder:
    """The lexical candidates each fused query started from and the model's nearest rows,
    recorded by wrapping SemanticSignal.fuse / nearest_rows (the search itself is unchanged)."""

    def __init__(self):
        self.lexical: set[int] = set()
        self.nearest: set[int] = set()
        fuse, nearest = semantic_signal.SemanticSignal.fuse, semantic_signal.SemanticSignal.nearest_rows
        recorder = self

        def recording_fuse(signal, candidates, *args, **kwargs):
            recorder.lexical = {h.rowid for h in candidates if h.score > 0}
            return fuse(signal, candidates, *args, **kwargs)

        def recording_nearest(signal, query):
            found = nearest(signal, query)
            recorder.nearest = {rowid for rowid, _, _ in found[1]} if found else set()
            return found

        semantic_signal.SemanticSignal.fuse = recording_fuse
        semantic_signal.SemanticSignal.nearest_rows = recording_nearest

    def reset(self) -> None:
        self.lexical, self.nearest = set(), set()


def measure(units, ranking: Ranking, recorder: Recorder) -> dict[str, dict[str, float]]:
    """fold -> {r10, model_only, model_only_evidence, lexical_reach, model_reach} (per-query means)."""
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, int] = defaultdict(int)
    for unit in units:
        searcher = unit.open()
        searcher.ranking = ranking
        rows = {}
        for q in unit.questions:
            recorder.reset()
            hits = searcher.search(SearchRequest(q["query"], k=retrieval_cv.K, layers=("L6",)))
            if not rows:
                rows = dict(searcher.store.db.execute("SELECT item_id, rowid FROM items"))
            relevant = {rows.get(i) for i in q["relevant"]} - {None}
            top = {h.rowid for h in hits}
            only = top - recorder.lexical if recorder.nearest else set()
            s = sums[unit.fold]
            s["r10"] += len({h.item_id for h in hits} & q["relevant"]) / len(q["relevant"])
            s["model_only"] += len(only)
            s["model_only_evidence"] += len(only & relevant)
            s["lexical_reach"] += len(relevant & recorder.lexical) / max(len(relevant), 1)
            s["model_reach"] += len(relevant & recorder.nearest) / max(len(relevant), 1)
            counts[unit.fold] += 1
    return {fold: {name: value / counts[fold] for name, value in s.items()} for fold, s in sums.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", choices=sorted(retrieval_cv.FOLD_OF))
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--bench-dir", type=Path, default=retrieval.DEFAULT_BENCH)
    parser.add_argument("--model", default="multilingual-e5-small")
    parser.add_argument("--variants", type=json.loads, default={})
    parser.add_argument("--folds", default="", help="only these folds (comma-separated)")
    args = parser.parse_args()
    family = retrieval.FAMILIES[args.dataset]
    sets = family.load(args.bench_dir)
    units = retrieval_cv.build_units(sets, args.dataset, retrieval_cv.FOLD_OF[args.dataset], args.workdir, None)
    if args.folds:
        units = [u for u in units if u.fold in args.folds.split(",")]
    unembedded = [u.name for u in units if not semantic_signal.has_vectors(Layout(u.root))]
    if unembedded:  # a memory without vectors would count as lexical in every fused row
        print(f"left out, no item vectors: {len(unembedded)} memories ({', '.join(unembedded[:3])} …)")
        units = [u for u in units if u.name not in unembedded]
    retrieval_cv.memoize_query_vectors()
    recorder = Recorder()
    base = Ranking(semantic=tuple({**DEFAULTS["semantic"], "model": args.model}.items()))
    named = {"lexical": base._replace(fusion="none"), "fused (defaults)": base,
             f"model alone (weight {ALONE:g})": base._replace(semantic_weight=ALONE, fused_neighbour_weight=0.0),
             **{name: base._replace(**values) for name, values in args.variants.items()}}
    print(f"{args.dataset}, {args.model}: R@{retrieval_cv.K} per fold; model-only = fused top-ten items that were "
          f"no lexical candidate (per query; evidence among them); reach = share of the evidence among the "
          f"lexical candidates / the model's {base.semantic_candidates} nearest")
    for name, ranking in named.items():
        per_fold = measure(units, ranking, recorder)
        total = {key: sum(per_fold[f][key] * sum(len(u.questions) for u in units if u.fold == f) for f in per_fold)
                 / sum(len(u.questions) for u in units) for key in next(iter(per_fold.values()))}
        for fold, m in [*per_fold.items(), ("pooled", total)]:
            print(f"  {name:<28} {fold:<9} R@10 {m['r10']:.3f}  model-only {m['model_only']:.2f} "
                  f"(evidence {m['model_only_evidence']:.2f})  reach lexical {m['lexical_reach']:.3f} "
                  f"model {m['model_reach']:.3f}", flush=True)


if __name__ == "__main__":
    main()
