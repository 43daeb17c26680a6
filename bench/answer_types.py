"""What the expected-answer stage (memctl.recall.ranking.answer_types) costs a search: `memctl search` as
a whole process over typed questions (when / how old / how many …, English and Chinese), with
`[ranking] answer_type_weight` at 0 (the stage off) and at its default, each query run both ways
in turn so that load from elsewhere weighs on both alike.

    python bench/answer_types.py ROOT [--rounds 3]

ROOT is a scratch memory without a memctl.toml of its own (for instance the 1 GB one
`bench/search_scale.py --sizes 1G --keep` leaves): the bench writes one (atomically, with the
weight of each run) and removes it at the end, so a killed run leaves nothing of a person's
changed, only its own file.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_scale import memctl_exe, timed_process  # noqa: E402  (bench/ on the path first)

from memctl.core.config import DEFAULTS  # noqa: E402
from memctl.core.fsutil import atomic_write_bytes  # noqa: E402

QUERIES = [
    "when did we migrate the database", "when was the cache timeout changed", "how many workers does the queue use",
    "how long did the retry take", "what time is the schema review", "how much did the index cost",
    "我们什么时候迁移的数据库", "缓存超时是哪天改的", "队列有几个进程", "这个服务多久重启一次", "索引花了多少钱",
    "上次部署是什么时候",
]


def timed(exe: str, root: Path, query: str) -> float:
    return timed_process([exe, "--root", str(root), "search", query])[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    exe, config = memctl_exe(), args.root / "memctl.toml"
    if config.exists() or config.is_symlink():
        raise SystemExit(f"{config} exists: run this on a scratch memory without a memctl.toml")
    weights = (0.0, DEFAULTS["ranking"]["answer_type_weight"])
    walls: dict[float, list[float]] = {w: [] for w in weights}
    try:
        timed(exe, args.root, QUERIES[0])  # the page cache, once
        for _ in range(args.rounds):
            for query in QUERIES:
                for weight in weights:
                    atomic_write_bytes(config, f"[ranking]\nanswer_type_weight = {weight}\n".encode())
                    walls[weight].append(timed(exe, args.root, query))
    finally:
        config.unlink(missing_ok=True)
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
