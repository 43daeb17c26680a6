"""bench/search_scale.py's measuring helpers: the work that would inflate every later process's
reported peak RSS runs in a forked child."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "search_scale.py"


def bench_module():
    sys.path.insert(0, str(BENCH.parent))
    try:
        spec = importlib.util.spec_from_file_location("bench_search_scale", BENCH)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH.parent))


@pytest.mark.skipif(sys.platform != "linux", reason="fork and ru_maxrss as Linux has them")
def test_work_in_a_child_leaves_the_peak_rss_of_later_processes_alone():
    bench = bench_module()
    assert bench.in_child(os.getpid) != os.getpid()
    assert bench.in_child(sum, [1, 2], start=3) == 6
    assert bench.in_child(eval, "len(b'x' * 300 * 1024 * 1024)") == 300 * 1024 * 1024  # 300 MB written, in the child
    _, code, rss_kb, _, _ = bench.timed_process_cpu([sys.executable, "-c", "pass"])
    assert code == 0 and rss_kb < 200 * 1024  # a bare interpreter; 300 MB+ had the bytes grown this process
