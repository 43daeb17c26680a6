#!/usr/bin/env python3
"""An upper bound of MemDaily's pooled R@10 that holds for any deterministic ranking (issue #15,
the `items` fold): questions of one pool with the very same wording get the same ten rows, which
can hold at most ten of their targets (the best ten: each target row counts 1/|its question's
targets|). Other questions are counted as perfect, so the bound is loose where wordings merely
look alike.

    python3 bench/memdaily_ceiling.py [--bench-dir ../shared/bench]
"""
import argparse
import json
from collections import defaultdict
from pathlib import Path

from retrieval import DEFAULT_BENCH

parser = argparse.ArgumentParser()
parser.add_argument("--bench-dir", type=Path, default=DEFAULT_BENCH)
d = json.loads((parser.parse_args().bench_dir / "memdaily" / "memdaily_dev.json").read_text(encoding="utf-8"))
K = 10
by_fold = defaultdict(lambda: [0.0, 0])
for qt, scen in d.items():
    for sc, trajs in scen.items():
        groups = defaultdict(list)
        for t in trajs:
            tg = t['QA'].get('target_step_id') or []
            if tg:
                groups[t['QA']['question']].append(len(tg))
        bound = 0.0; n = 0
        for q, sizes in groups.items():
            weights = sorted((1 / s for s in sizes for _ in range(s)), reverse=True)
            bound += sum(weights[:K]); n += len(sizes)
        dup = sum(len(v) for v in groups.values() if len(v) > 1)
        print(f"{qt}/{sc}: n={n} ceiling={bound/n:.3f} questions sharing their exact string={dup}")
        by_fold[sc][0] += bound; by_fold[sc][1] += n
for sc, (b, n) in by_fold.items():
    print(f"fold {sc}: n={n} ceiling R@{K} = {b/n:.3f}")
tb = sum(b for b, n in by_fold.values()); tn = sum(n for b, n in by_fold.values())
print(f"pooled ceiling {tb/tn:.3f}")
