#!/usr/bin/env python3
"""The IVF probe of a large vector store in its two formats: format 2 (`items` by list, then each
row's vector looked up in `cache` by its text's hash: one random B-tree lookup a row) and format 3
(`probe(list, rowid, hash, vec, inctx)`, primary key `(list, rowid)`, WITHOUT ROWID: a list's
vectors contiguous), both read by memctl's own `VectorStore.nearest`. Each query runs in a fresh
process, as a one-shot `memctl search` reads the store, and both formats must give the same rows
and cosines.

    .venv/bin/python bench/ivf_layout.py OLD.sqlite [--laid NEW.sqlite] [--workdir DIR] [--queries 6]

OLD: a format-2 `.memctl/vectors.sqlite` with trained lists (e.g. the synthetic full store of
`bench/search_scale.py --semantic --embed-for … --keep-synthetic` written by a release before
format 3). Without --laid, OLD is copied to DIR/laid.sqlite and the copy laid out by
`VectorStore.lay_out` (what the first embedding pass does; its time is reported). bench/RESULTS.md,
"At 1 GB".
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ONE_QUERY = r"""
import json, resource, sys, time
import numpy as np
from memctl.recall.embeddings.vectors import VectorStore
store = VectorStore(sys.argv[1], readonly=True)
query = np.random.default_rng(int(sys.argv[2])).standard_normal(store.dim).astype(np.float32)
query /= np.linalg.norm(query)
store.centroids()
started = time.perf_counter()
nearest = store.nearest(query, 100, 8, context=0.7)
ms = 1000 * (time.perf_counter() - started)
print(json.dumps({"laid_out": store.laid_out, "ms": ms, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                  "nearest": [[r, h.hex(), c] for r, h, c in nearest]}))
"""


def lay_out_copy(old: Path, target: Path) -> tuple[float, float]:
    """(wall s, CPU s) of laying out a copy of `old`, in a child process (its own RSS)."""
    shutil.copy(old, target)
    script = ("import sys, time\nfrom memctl.recall.embeddings.vectors import VectorStore\n"
              "store = VectorStore(sys.argv[1]); started = time.perf_counter(); assert store.lay_out()\n"
              "store.close(); print(time.perf_counter() - started)\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", script, str(target)], capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return float(done.stdout), (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def one_query(store: Path, seed: int) -> dict:
    import json

    done = subprocess.run([sys.executable, "-c", ONE_QUERY, str(store), str(seed)], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("--laid", type=Path, help="a format-3 copy of OLD laid out before (else made in --workdir)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/memctl-ivf"))
    parser.add_argument("--queries", type=int, default=6)
    args = parser.parse_args()
    laid = args.laid
    if laid is None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        laid = args.workdir / "laid.sqlite"
        wall, cpu = lay_out_copy(args.old, laid)
        print(f"laid out a copy: {wall:.0f} s wall, {cpu:.0f} CPU-s; {args.old.stat().st_size / 1e6:.0f} MB -> "
              f"{laid.stat().st_size / 1e6:.0f} MB")
    print(f"load {os.getloadavg()[0]:.1f}")
    for seed in range(args.queries):
        old, new = one_query(args.old, seed), one_query(laid, seed)
        assert not old["laid_out"] and new["laid_out"]
        same = "same rows and cosines" if old["nearest"] == new["nearest"] else "DIFFERENT ROWS"
        print(f"query {seed}: format 2 {old['ms']:.0f} ms, format 3 {new['ms']:.0f} ms ({same}; "
              f"{len(new['nearest'])} nearest; peak RSS {old['rss_mb']} / {new['rss_mb']} MB)")


if __name__ == "__main__":
    main()
