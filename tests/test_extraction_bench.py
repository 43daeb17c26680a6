"""bench/extraction.py on LoCoMo's development conversations: the extractor keeps the issue's
targets for coverage (≥ 0.60 of the gold facts) and bytes (≤ 0.5 of the raw turns). Without the
search (R@10 needs a memory per conversation: `bench/extraction.py` itself reports it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import find_shared

BENCH = Path(__file__).resolve().parent.parent / "bench" / "extraction.py"


def test_iso_time_of_the_benchmarks_dates():
    sys.path.insert(0, str(BENCH.parent))
    try:
        from extraction import iso_time
    finally:
        sys.path.remove(str(BENCH.parent))
    assert iso_time("1:56 pm on 8 May, 2023") == "2023-05-08T13:56:00"
    assert iso_time("12:05 am on 1 Jan, 2024") == "2024-01-01T00:05:00"
    assert iso_time("2024年04月01日 周一 08:30") == "2024-04-01T08:30:00"
    assert iso_time("someday") == ""


def test_precision_counts_the_entries_whose_turn_is_evidence():
    sys.path.insert(0, str(BENCH.parent))
    try:
        from extraction import Extracted, Figures
    finally:
        sys.path.remove(str(BENCH.parent))
    extracted = Extracted()
    extracted.by_turn = {"c|D1:1": ["a", "b"], "c|D1:2": ["c"], "c|D1:4": ["d"]}
    extracted.turns = 4
    raw = [{"id": f"c|D1:{n}", "text": "x"} for n in range(1, 5)]
    figures = Figures()
    figures.add(extracted, [{"c|D1:1"}, {"c|D1:1", "c|D1:3"}], raw)
    rows = dict(figures.rows())
    assert rows["precision (learned entries whose turn is a gold fact's evidence turn)"] == "0.500 (2/4)"
    assert rows["evidence turns / all turns (the precision of keeping every turn)"] == "0.500 (2/4)"
    assert rows["coverage (gold facts whose evidence turn gave an entry)"] == "1.000 (2/2)"


@pytest.mark.skipif(find_shared() is None, reason="the development sets (../shared/bench) are not here")
def test_locomo_coverage_and_bytes_meet_the_targets():
    shared = find_shared()
    done = subprocess.run([sys.executable, str(BENCH), "--only", "locomo", "--no-search",
                           "--bench-dir", str(shared / "bench")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    coverage = float(re.search(r"\| coverage [^|]*\| ([0-9.]+)", done.stdout)[1])
    kept = float(re.search(r"\| learned bytes / raw bytes \| ([0-9.]+)", done.stdout)[1])
    precision = float(re.search(r"\| precision [^|]*\| ([0-9.]+)", done.stdout)[1])
    every_turn = float(re.search(r"\| evidence turns / all turns [^|]*\| ([0-9.]+)", done.stdout)[1])
    assert coverage >= 0.60 and kept <= 0.5, done.stdout
    assert precision > every_turn, done.stdout  # what the rules keep is likelier a fact's turn than a turn is
