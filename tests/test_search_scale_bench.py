"""bench/search_scale.py's measuring helpers: the work that would inflate every later process's
reported peak RSS runs in a forked child."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "search_scale.py"


CHECK = """
import importlib.util, os, sys
sys.path.insert(0, {bench_dir!r})
spec = importlib.util.spec_from_file_location("bench_search_scale", {bench!r})
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
assert bench.in_child(os.getpid) != os.getpid()
assert bench.in_child(sum, [1, 2], start=3) == 6
{allocate}
print(bench.timed_process_cpu([sys.executable, "-c", "pass"])[2])
"""


def _peak_rss_kb_of_a_process_started_after(allocate: str) -> int:
    """In a new interpreter (the test runner's own peak, grown by other tests, would be every
    process's it starts): `allocate`, then a bare interpreter timed as the bench times a search."""
    script = CHECK.format(bench_dir=str(BENCH.parent), bench=str(BENCH), allocate=allocate)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[-1])


@pytest.mark.skipif(sys.platform != "linux", reason="fork and ru_maxrss as Linux has them")
def test_work_in_a_child_leaves_the_peak_rss_of_later_processes_alone():
    in_child = _peak_rss_kb_of_a_process_started_after(
        'assert bench.in_child(eval, "len(b\'x\' * 300 * 1024 * 1024)") == 300 * 1024 * 1024')
    in_process = _peak_rss_kb_of_a_process_started_after("grown = b'x' * 300 * 1024 * 1024")
    assert in_child < 200 * 1024  # a bare interpreter
    assert in_process > 300 * 1024  # what the bench reported before: its own peak
