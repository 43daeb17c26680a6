"""What the expected-answer stage (memctl.recall.answer_types) costs a search: `memctl search` as
a whole process over typed questions (when / how old / how many …, English and Chinese), with
`[ranking] answer_type_weight` at 0 (the stage off) and at its default, each query run both ways
in turn so that load from elsewhere weighs on both alike.

    python bench/answer_types.py ROOT [--rounds 3]

ROOT is any memory (for instance the 1 GB one `bench/search_scale.py --sizes 1G --keep` leaves).
Its memctl.toml is put back as it was at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

QUERIES = [
    "when did we migrate the database", "when was the cache timeout changed", "how many workers does the queue use",
    "how long did the retry take", "what time is the schema review", "how much did the index cost",
    "我们什么时候迁移的数据库", "缓存超时是哪天改的", "队列有几个进程", "这个服务多久重启一次", "索引花了多少钱",
    "上次部署是什么时候",
]


def memctl() -> str:
    found = shutil.which("memctl", path=str(Path(sys.executable).parent)) or shutil.which("memctl")
    if not found:
        raise SystemExit("memctl is not installed in this environment")
    return found


def timed(exe: str, root: Path, query: str) -> float:
    started = time.perf_counter()
    subprocess.run([exe, "--root", str(root), "search", query], capture_output=True, check=False)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from memctl.core.config import DEFAULTS

    exe, config = memctl(), args.root / "memctl.toml"
    kept = config.read_bytes() if config.exists() else None
    if kept and b"[ranking]" in kept:
        raise SystemExit(f"{config} has a [ranking] table already: run this on a memory without one")
    weights = (0.0, DEFAULTS["ranking"]["answer_type_weight"])
    walls: dict[float, list[float]] = {w: [] for w in weights}
    try:
        timed(exe, args.root, QUERIES[0])  # the page cache, once
        for _ in range(args.rounds):
            for query in QUERIES:
                for weight in weights:
                    config.write_bytes((kept or b"") + f"\n[ranking]\nanswer_type_weight = {weight}\n".encode())
                    walls[weight].append(timed(exe, args.root, query))
    finally:
        if kept is None:
            config.unlink(missing_ok=True)
        else:
            config.write_bytes(kept)
    print(f"memctl search over {len(QUERIES)} typed questions x {args.rounds} rounds, {args.root} "
          f"(load {os.getloadavg()[0]:.1f})")
    base = statistics.median(walls[weights[0]])
    for weight in weights:
        p50 = statistics.median(walls[weight])
        p95 = sorted(walls[weight])[int(0.95 * (len(walls[weight]) - 1))]
        print(f"  answer_type_weight = {weight}: p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
              f"{p50 / base:.2f}x the stage off")


if __name__ == "__main__":
    main()
