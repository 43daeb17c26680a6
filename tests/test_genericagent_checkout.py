"""memctl on a GenericAgent checkout as it is (issue 10), with GenericAgent's own code as the
oracle: its archiver runs first, its scheduler's L4 path runs after `memctl init`, its plugin
loader fires the recall hook. See tests/ga_checkout.py for how the checkout is laid out."""

from __future__ import annotations

import collections
import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from ga_checkout import REAL_WRITER, UPSTREAM, load_upstream_archiver, make_checkout, real_writer_logs, upstream_name


def _manifest(l4: Path) -> list[dict]:
    path = l4 / "manifest.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


# ---------------------------------------------------------------- names (Must show 2)


def test_session_names_equal_genericagents_for_every_real_writer_log(tmp_path, run):
    checkout = make_checkout(tmp_path)
    hashes = checkout.add_real_writer_logs()
    archiver = load_upstream_archiver(tmp_path / "oracle")
    expected = {sha: upstream_name(archiver, REAL_WRITER / name, tmp_path / "scratch") for name, sha in hashes.items()}
    assert "0415_1000-0415_1000" in expected.values()  # last Prompt 10:00, a Response at 10:01 after it

    result = run("archive", "--keep-newest", "0", "--min-age", "0s", root=checkout.memory)
    assert result.returncode == 0, result.stderr

    records = {r["sha256"]: r["name"] for r in _manifest(checkout.l4)}
    assert set(records) == set(expected)
    clashes = collections.Counter(expected.values())
    for sha, name in records.items():
        if clashes[expected[sha]] > 1:  # two sessions with one name: memctl's suffix keeps both
            assert name in (expected[sha], f"{expected[sha]}_2")
        else:
            assert name == expected[sha]
    assert sorted(records.values()).count("0410_1100-0410_1100_2") == 1


def test_name_clock_sees_markers_split_across_reads():
    from memctl.l4.naming import NameClock

    data = (REAL_WRITER / "model_responses_738872.txt").read_bytes()
    whole, pieces = NameClock(), NameClock()
    whole.feed(data)
    whole.finish()
    for at in range(0, len(data), 7):
        pieces.feed(data[at: at + 7])
    pieces.finish()
    assert pieces.base_name() == whole.base_name() == "0405_0902-1224_0933"  # a quoted Prompt counts, as upstream
