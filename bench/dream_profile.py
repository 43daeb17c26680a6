"""Where a dream's planning holds its memory: tracemalloc over `dream.plan_now` on a bench
memory of N entries (bench/dream.py's generator): the traced current and peak, and the 12 lines
holding the most once the plan is made.

    .venv/bin/python bench/dream_profile.py 30000
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import dream as bench  # noqa: E402  (bench/dream.py, beside this file)

from memctl.core.config import load_settings  # noqa: E402
from memctl.longterm import dream  # noqa: E402


def main(n: int) -> None:
    tmp = tempfile.mkdtemp(prefix="memctl-profile-")
    try:
        root = Path(tmp) / "memory"
        bench.write_memory(root, n)
        os.environ["MEMCTL_NOW"] = bench.NOW.isoformat()
        settings = load_settings(root)
        tracemalloc.start()
        plan = dream.plan_now(settings, bench.NOW, dream.DreamOptions())
        current, peak = tracemalloc.get_traced_memory()
        print(f"entries {n}: traced {current / 2**20:.1f} MiB held, {peak / 2**20:.1f} MiB peak; "
              f"{len(plan.changes)} changes, {len(plan.kept)} kept")
        for stat in tracemalloc.take_snapshot().statistics("lineno")[:12]:
            print(stat)
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30000)
