"""Round trips of one index refresh on PostgreSQL after a remember (issue #30).

A throwaway cluster (tests/pgcluster.py), a memory on it with `--facts` entries, then
`--rounds` times: `--per-refresh` `memctl remember`s (processes, not counted), then one refresh of the index
over a kept connection, as `memctl serve`'s refresher runs it (memctl.serve.readers.Refresher),
counting its statements (`execute`/`executemany` calls) and psycopg's waits on the socket (each
a round trip or part of one). Prints the median and range of both, and what the refresh added.

    .venv/bin/python bench/pg_refresh_trips.py [--facts 30] [--rounds 10] [--per-refresh 1] [--show]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CJK = ("数据库", "备份", "周会", "部署", "预算", "会议纪要", "项目", "上线", "回滚", "监控", "告警", "容量")
sys.path.insert(0, str(HERE.parent / "tests"))


def memctl(root: Path, *args: str, env: dict) -> str:
    done = subprocess.run([str(Path(sys.executable).parent / "memctl"), "--root", str(root), *args],
                          capture_output=True, env=env, text=True)
    if done.returncode != 0:
        raise SystemExit(f"memctl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def counted(store) -> dict:
    """Counters of the store's statements and waits (a counting cursor class, a wrapped wait)."""
    import psycopg

    counts = {"statements": 0, "waits": 0, "shown": []}
    conn = store.db
    real_wait = conn.wait

    class CountingCursor(psycopg.Cursor):
        def execute(self, *args, **kwargs):
            counts["statements"] += 1
            counts["shown"].append(" ".join(str(args[0]).split())[:150])
            return super().execute(*args, **kwargs)

        def executemany(self, *args, **kwargs):
            counts["statements"] += 1
            counts["shown"].append("MANY " + " ".join(str(args[0]).split())[:145])
            return super().executemany(*args, **kwargs)

    def wait(*args, **kwargs):
        counts["waits"] += 1
        return real_wait(*args, **kwargs)

    conn.cursor_factory, conn.wait = CountingCursor, wait
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-refresh", type=int, default=1, help="remembers before each refresh")
    parser.add_argument("--show", action="store_true", help="print the last refresh's statements")
    args = parser.parse_args()
    from pgcluster import running_cluster

    from memctl.core.config import load_settings
    from memctl.recall.indexing import pg_index
    from memctl.recall.indexing.index import IndexOptions, SearchIndex

    with running_cluster() as dsn, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "memory"
        env = {**os.environ, "MEMCTL_PG_DSN": dsn}
        memctl(root, "init", env=env)
        with open(root / "memctl.toml", "a", encoding="utf-8") as handle:
            handle.write('\n[store]\nbackend = "postgres"\nmemory = "trips"\n')
        memctl(root, "init", env=env)
        for n in range(args.facts):
            memctl(root, "remember", "--type", "event", f"fact {n}: host bk-{n:02d} runs the 夜间备份 job at {n % 24}:00", env=env)
        memctl(root, "index", "refresh", env=env)
        os.environ["MEMCTL_PG_DSN"] = dsn
        settings = load_settings(root)
        index = SearchIndex(settings.layout, IndexOptions.from_settings(settings))
        store = pg_index.open_store(index)
        counts = counted(store)
        statements, waits, added = [], [], []
        for n in range(args.rounds):
            for m in range(args.per_refresh):
                memctl(root, "remember", "--type", "event",
                       f"new fact {n}.{m}: the {CJK[m % len(CJK)]} replica bk-{n + 50} lags by {m} s, "
                       f"{CJK[(m + 5) % len(CJK)]} at {n}:{m:02d}", env=env)
            counts["statements"] = counts["waits"] = 0
            counts["shown"].clear()
            report = pg_index.refresh_on(index, store)
            statements.append(counts["statements"])
            waits.append(counts["waits"])
            added.append(report.docs_added)
        store.close()
    if args.show:
        print("\n".join(counts["shown"]))
    print(f"refresh after {args.per_refresh} remember(s), {args.rounds} rounds over {args.facts} facts: "
          f"statements p50 {statistics.median(statements)} ({min(statements)}-{max(statements)}), "
          f"waits p50 {statistics.median(waits)} ({min(waits)}-{max(waits)}), items added {sorted(set(added))}")


if __name__ == "__main__":
    main()
