#!/usr/bin/env python3
"""`memctl compose` as GenericAgent's recall plugin runs it before every prompt: one process per
request, on a built memory (e.g. the 1 GB one of `bench/search_scale.py --keep`), p50 and p95 wall
time over a set of English and Chinese requests, each request run in every mode in turn so that
the machine's load weighs on the modes alike:

- lexical: `[ranking] fusion = "none"`;
- and, when the memory has item vectors (`memctl index embed`): fused in one process (`[semantic]
  fork = false`, `MEMCTL_RESIDENT=0`: what compose did before it started its semantic half at
  once), fused with the forked helper (`MEMCTL_RESIDENT=0`), fused through the resident searcher
  (the default; started and warm before the timing).

    .venv/bin/python bench/compose.py ROOT [--model multilingual-e5-small] [--rounds 3]

ROOT's memctl.toml is rewritten for each mode and left with `[semantic] model = MODEL` alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

REQUESTS = ["when did Caroline go to the support group", "what does Melanie paint", "budget review meeting moved",
            "kitchen faucet repaired", "我家的洗衣机是什么牌子", "上周末去了哪个公园", "妈妈做的红烧肉", "运动鞋 舒服"]
MODES = (("lexical", '[ranking]\nfusion = "none"\n', {"MEMCTL_RESIDENT": "0"}),
         ("fused, one process", "fork = false\n", {"MEMCTL_RESIDENT": "0"}),
         ("fused, forked helper", "", {"MEMCTL_RESIDENT": "0"}),
         ("fused, resident searcher", "", {}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--model", default="multilingual-e5-small")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import search_scale as scale
    from search_scale_semantic import warm_resident_searcher

    exe, env = scale.memctl_exe(), scale.child_env()
    config = args.root / "memctl.toml"
    fused = (args.root / ".memctl" / "vectors.sqlite").is_file()
    modes = MODES if fused else MODES[:1]
    config.write_text(f'[semantic]\nmodel = "{args.model}"\n', encoding="utf-8")
    if fused:
        try:
            warm_resident_searcher(args.root, exe, env)
        except ImportError:  # a memctl from before the resident searcher: that mode is the fork's
            pass
    print(f"load {os.getloadavg()[0]:.1f}; {args.root}; {len(REQUESTS)} requests x {args.rounds} rounds")
    walls: dict[str, list[float]] = {label: [] for label, _, _ in modes}
    for _ in range(args.rounds):
        for request in REQUESTS:
            for label, extra, overrides in modes:
                config.write_text(f'[semantic]\nmodel = "{args.model}"\n{extra}', encoding="utf-8")
                started = time.perf_counter()
                done = subprocess.run([exe, "--root", str(args.root), "compose", "--", request],
                                      env={**env, **overrides}, capture_output=True)
                walls[label].append(time.perf_counter() - started)
                assert done.returncode == 0, (label, request, done.stderr)
    config.write_text(f'[semantic]\nmodel = "{args.model}"\n', encoding="utf-8")
    lexical = statistics.median(walls["lexical"])
    print(f"{'memctl compose':<28}{'p50':>8}{'p95':>8}{'/ lexical':>11}")
    for label, values in walls.items():
        p50 = statistics.median(values)
        print(f"{label:<28}{p50 * 1000:>6.0f}ms{scale.pct(values, 0.95) * 1000:>6.0f}ms{p50 / lexical:>10.2f}x")
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
