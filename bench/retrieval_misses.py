"""Where a family's R@10 misses come from: per question type, the evidence turns left out of the
top 10, the rank each reaches within the top 100 (or none), and how many of the query's words
each holds (0: only a model, or the turn's neighbours, can find it).

Over the memories a `bench/retrieval.py --cv --workdir DIR` run kept, in-process at the defaults:

    python bench/retrieval_misses.py longmemeval /tmp/cv
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import retrieval  # noqa: E402  (bench/ on the path first)
import retrieval_cv  # noqa: E402

from memctl.recall.ranking.ranking import Ranking  # noqa: E402
from memctl.recall.search import SearchRequest  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", choices=sorted(retrieval_cv.FOLD_OF))
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--bench-dir", type=Path, default=retrieval.DEFAULT_BENCH)
    args = parser.parse_args()
    family = retrieval.FAMILIES[args.dataset]
    sets = family.load(args.bench_dir)
    units = retrieval_cv.build_units(sets, args.dataset, retrieval_cv.FOLD_OF[args.dataset], args.workdir, None)
    texts = {d["id"]: d["text"] for _, docs, _ in sets for d in docs}
    stop = set(retrieval.words("what which who when where how did do does was were is are the a an i my me of to "
                               "in on for and or with you your that this have has had at by from it its be"))
    rows: dict[str, Counter] = defaultdict(Counter)
    for unit in units:
        searcher = unit.open()
        searcher.ranking = Ranking()
        for q in unit.questions:
            ranked = [h.item_id for h in searcher.search(SearchRequest(q["query"], k=100, layers=("L6",)))]
            asked = set(retrieval.words(q["query"])) - stop
            for turn in q["relevant"]:
                rank = ranked.index(turn) + 1 if turn in ranked else 0
                if 0 < rank <= 10:
                    rows[q["category"]]["found"] += 1
                    continue
                shared = len(asked & set(retrieval.words(texts[turn])))
                rows[q["category"]]["missed"] += 1
                rows[q["category"]]["rank 11-30" if 10 < rank <= 30 else "rank 31-100" if rank else "not in 100"] += 1
                rows[q["category"]]["no query word" if not shared else "1 query word" if shared == 1 else "2+ query words"] += 1
        searcher.close()
        unit.searcher = None
    columns = ["found", "missed", "rank 11-30", "rank 31-100", "not in 100", "no query word", "1 query word",
               "2+ query words"]
    print(f"{args.dataset}: evidence turns at the defaults (R@10 misses, by type)")
    print(f"{'type':<28}" + "".join(f"{c:>15}" for c in columns))
    total = Counter()
    for kind, counts in rows.items():
        total.update(counts)
        print(f"{kind:<28}" + "".join(f"{counts[c]:>15}" for c in columns))
    print(f"{'all':<28}" + "".join(f"{total[c]:>15}" for c in columns))


if __name__ == "__main__":
    main()
