#!/usr/bin/env python3
"""How many cores `memctl archive` could use: every 5 ms, count its threads in state R
(running or waiting for a core; a thread waiting for the GIL sleeps, so it does not count).
On a loaded machine this shows the parallelism that wall time cannot.

    .venv/bin/python bench/archive_runnable.py RAW_LOG_FOLDER [--stdlib]

RAW_LOG_FOLDER (e.g. a corpus from bench/archive.py, kept with --out and a copy) is copied,
archived once with zlib-ng, or with zlib_ng's import blocked (--stdlib), and removed again.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from archive import memctl_command  # noqa: E402


def runnable_threads(pid: int) -> int:
    count = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/stat") as stat:
            count += stat.read().rsplit(")", 1)[1].split()[0] == "R"
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("raw", type=Path)
    parser.add_argument("--stdlib", action="store_true", help="block zlib_ng's import (the fallback)")
    args = parser.parse_args()
    memctl = shutil.which("memctl", path=str(Path(sys.executable).parent)) or "memctl"
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "memory").mkdir()
        shutil.copytree(args.raw, Path(work) / "temp" / "model_responses")
        process = subprocess.Popen([*memctl_command(memctl, not args.stdlib), "--root", f"{work}/memory",
                                    "archive", "--keep-newest", "0", "--quiet"])
        samples: collections.Counter = collections.Counter()
        while process.poll() is None:
            try:
                samples[runnable_threads(process.pid)] += 1
            except (FileNotFoundError, ProcessLookupError):
                break
            time.sleep(0.005)
    total = sum(samples.values())
    shares = "  ".join(f"{k} runnable: {v / total:.0%}" for k, v in sorted(samples.items()))
    busy = sum(min(k, 2) * v for k, v in samples.items()) / total
    print(f"{'stdlib zlib' if args.stdlib else 'zlib-ng'}: {shares}; cores usable of 2: {busy:.2f} ({total} samples)")


if __name__ == "__main__":
    main()
