#!/usr/bin/env python3
"""The IVF probe of a large vector store on two layouts: today's (`items` by list, then each
row's vector looked up in `cache` by its text's hash: one random B-tree lookup a row) and a
prototype with the probe's rows clustered by list (`probe(list, rowid, hash, vec, inctx)`,
primary key `(list, rowid)`, WITHOUT ROWID: a list's vectors contiguous). Each query runs in a
fresh process, as a one-shot `memctl search` reads the store.

    .venv/bin/python bench/ivf_layout.py STORE.sqlite [--workdir DIR] [--queries 4]

STORE: a `.memctl/vectors.sqlite` with trained lists (e.g. the synthetic full store that
`bench/search_scale.py --semantic --embed-for … --keep-synthetic` keeps). The prototype is
written to DIR/clustered.sqlite (the vectors a second time). bench/RESULTS.md, "At 1 GB".
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CLUSTER = ("INSERT INTO probe SELECT items.list, items.rowid, items.hash, cache.vec, inctx.vec FROM s.items AS items "
           "JOIN s.cache AS cache USING(hash) LEFT JOIN s.context AS context ON context.rowid = items.rowid "
           "LEFT JOIN s.cache AS inctx ON inctx.hash = context.hash ORDER BY items.list, items.rowid")

ONE_QUERY = r"""
import resource, sqlite3, sys, time
import numpy as np
from memctl.recall.vectors import _ROWS, VectorStore
store = VectorStore(sys.argv[1], readonly=True)
clustered = sqlite3.connect(f"file:{sys.argv[2]}?mode=ro", uri=True)
query = np.random.default_rng(int(sys.argv[3])).standard_normal(store.dim).astype(np.float32)
lists = [int(i) for i in np.argsort(-(store.centroids() @ query))[:8]]
marks = ",".join("?" * len(lists))
started = time.perf_counter()
rows = clustered.execute(f"SELECT rowid, hash, vec, inctx FROM probe WHERE list IN ({marks})", lists).fetchall()
middle = time.perf_counter()
today = store.db.execute(f"{_ROWS} WHERE items.list IN ({marks})", lists).fetchall()
done = time.perf_counter()
print(f"{len(rows)} rows: clustered {1000 * (middle - started):.0f} ms, today's join {1000 * (done - middle):.0f} ms "
      f"({len(today)} rows), peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB")
"""


def build_clustered(store: Path, target: Path) -> float:
    target.unlink(missing_ok=True)
    db = sqlite3.connect(target, isolation_level=None)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    db.execute("ATTACH DATABASE ? AS s", (f"file:{store}?mode=ro",))
    db.execute("CREATE TABLE probe(list INTEGER, rowid INTEGER, hash BLOB, vec BLOB, inctx BLOB, "
               "PRIMARY KEY(list, rowid)) WITHOUT ROWID")
    started = time.perf_counter()
    db.execute("BEGIN")
    db.execute(CLUSTER)
    db.execute("COMMIT")
    db.close()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/memctl-ivf"))
    parser.add_argument("--queries", type=int, default=4)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    target = args.workdir / "clustered.sqlite"
    seconds = build_clustered(args.store, target)
    print(f"clustered copy: {seconds:.0f} s, {target.stat().st_size / 1e6:.0f} MB; load {os.getloadavg()[0]:.1f}")
    for seed in range(args.queries):
        done = subprocess.run([sys.executable, "-c", ONE_QUERY, str(args.store), str(target), str(seed)],
                              capture_output=True, text=True, check=True)
        print(done.stdout.strip())


if __name__ == "__main__":
    main()
