#!/usr/bin/env python3
"""What a purge order costs a team memory's searches (issue #14): statements per `memctl search`
on machine B, counted in the process (every psycopg `Cursor.execute`, each `executemany` row),
before any purge, on the first search after machine A purged a string B's files hold (B
applies the order: its zip, history and L2 rewritten, then the refresh), and after.

    .venv/bin/python bench/purge_orders.py [--searches 10] [--src DIR]

`--src` runs memctl from another source tree (e.g. `git archive main | tar -x -C /tmp/main`) for
the before/after comparison; a tree without purge orders just never applies one. The server
is $MEMCTL_PG_DSN, or a throwaway cluster (bench/pgserver.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from pgserver import server_dsn, store_config  # noqa: E402

SECRET = "zephyr-vault-9931"
COUNTING = r"""
import sys, psycopg
count = [0]
real_execute, real_many = psycopg.Cursor.execute, psycopg.Cursor.executemany
def execute(self, *a, **k):
    count[0] += 1
    return real_execute(self, *a, **k)
def executemany(self, query, rows, *a, **k):
    rows = list(rows)
    count[0] += len(rows)
    return real_many(self, query, rows, *a, **k)
psycopg.Cursor.execute, psycopg.Cursor.executemany = execute, executemany
import atexit
atexit.register(lambda: sys.stderr.write(f"\nSTATEMENTS {count[0]}\n"))
sys.argv = ["memctl", *sys.argv[1:]]
from memctl.entry import main
main()
"""


def memctl(src: Path | None, dsn: str, root: Path, *args: str, count: bool = False):
    env = {**os.environ, "MEMCTL_PG_DSN": dsn, "LANG": "C.UTF-8"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    cmd = [sys.executable, "-c", COUNTING] if count else [sys.executable, "-m", "memctl"]
    started = time.monotonic()
    done = subprocess.run([*cmd, "--root", str(root), *args], capture_output=True, env=env, cwd=root.parent)
    seconds = time.monotonic() - started
    if done.returncode not in (0, 1):
        sys.exit(f"memctl {' '.join(args)}: exit {done.returncode}: {done.stderr.decode()[-400:]}")
    statements = None
    for line in done.stderr.decode().splitlines():
        if line.startswith("STATEMENTS "):
            statements = int(line.split()[1])
    return done, statements, seconds


def machine(src, dsn: str, base: Path, name: str, memory: str, secret_in_files: bool) -> Path:
    root = base / name / "memory"
    root.mkdir(parents=True)
    memctl(src, dsn, root, "init")
    with open(root / "memctl.toml", "a", encoding="utf-8") as handle:
        handle.write("\n" + store_config(memory))
    memctl(src, dsn, root, "init")
    if secret_in_files:
        raw = base / name / "raw"
        raw.mkdir()
        for sample in sorted((HERE.parent / "memctl" / "samples").glob("model_responses_*.txt")):
            text = sample.read_text(encoding="utf-8").replace("summary.md", f"summary-{SECRET}.md")
            (raw / sample.name).write_text(text, encoding="utf-8")
        memctl(src, dsn, root, "archive", str(raw), "--min-age", "0s", "--keep-newest", "0")
        with open(root / "global_mem.txt", "a", encoding="utf-8") as handle:
            handle.write(f"\n## [VAULT]\nvault code: {SECRET}\n")
    memctl(src, dsn, root, "index", "refresh")
    return root


def searches(src, dsn: str, root: Path, n: int) -> list[int]:
    return [memctl(src, dsn, root, "search", "weekly meeting notes", "--json", count=True)[1] for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searches", type=int, default=10)
    parser.add_argument("--src", type=Path, default=None, help="memctl's source tree to run (default: installed)")
    args = parser.parse_args()
    with server_dsn() as dsn, tempfile.TemporaryDirectory(prefix="memctl-purge-bench-") as tmp:
        base, memory = Path(tmp), f"bench{os.getpid()}"
        b = machine(args.src, dsn, base, "b", memory, secret_in_files=True)
        a = machine(args.src, dsn, base, "a", memory, secret_in_files=False)
        memctl(args.src, dsn, a, "remember", f"the vault code is {SECRET}", "--type", "event")
        steady = searches(args.src, dsn, b, args.searches)
        memctl(args.src, dsn, a, "forget", "--purge", "--match", SECRET, "--yes")
        first, first_statements, first_seconds = memctl(args.src, dsn, b, "search", SECRET, "--json", count=True)
        after = searches(args.src, dsn, b, args.searches)
        print(f"src: {args.src or 'installed'}")
        print(f"statements per search on B, before any purge: mean {statistics.mean(steady):.2f} "
              f"(min {min(steady)}, max {max(steady)}, n={len(steady)})")
        print(f"first search on B after A's purge: {first_statements} statements, {first_seconds:.2f} s wall; "
              f"hits holding the string: {first.stdout.decode().count(SECRET)}")
        print(f"statements per search on B, after: mean {statistics.mean(after):.2f} "
              f"(min {min(after)}, max {max(after)}, n={len(after)})")


if __name__ == "__main__":
    main()
