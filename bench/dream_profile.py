"""Where a dream's planning holds its memory: tracemalloc over `dream.plan_now` on a bench memory of N
entries (bench/dream.py's generator), the traced current and peak and the top 12 lines.

    .venv/bin/python bench/dream_profile.py 30000
"""
import sys, tracemalloc, tempfile, os
from pathlib import Path
sys.path.insert(0, "bench")
import dream as bench
from memctl.core.config import load_settings
from memctl.longterm import dream
n = int(sys.argv[1])
tmp = tempfile.mkdtemp(prefix="r3prof-")
root = Path(tmp) / "memory"
bench.write_memory(root, n)
os.environ["MEMCTL_NOW"] = bench.NOW.isoformat()
settings = load_settings(root)
tracemalloc.start()
p = dream.plan_now(settings, bench.NOW, dream.DreamOptions())
cur, peak = tracemalloc.get_traced_memory()
print("n", n, "traced current MiB", round(cur/2**20,1), "peak MiB", round(peak/2**20,1), "changes", len(p.changes), "kept", len(p.kept))
for s in tracemalloc.take_snapshot().statistics("lineno")[:12]:
    print(s)
import shutil; shutil.rmtree(tmp)
