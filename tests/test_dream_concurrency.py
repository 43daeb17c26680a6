"""A dream over 13,000 entries while another process calls `memctl remember` 200 times.

Real processes throughout: the dream plans without the lock and applies in short locked
steps, so every remember gets the lock within its small wait and none is lost. 13,000 entries
of bench/dream.py's memory make ~1,350 changes: more than one step's worth (STEP_CHANGES,
1,000), so the dream applies in at least two locked steps, as at 20,000 (~2,100 changes).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from conftest import clean_env

BENCH = Path(__file__).resolve().parent.parent / "bench" / "dream.py"
NOW = "2026-06-01T04:00:00"
ENTRIES = 13_000


def bench_module():
    spec = importlib.util.spec_from_file_location("bench_dream", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parses(path: Path) -> int:
    count = 0
    for raw in path.read_bytes().splitlines():
        if raw.strip():
            json.loads(raw)
            count += 1
    return count


# One writer process running the real command line (memctl.cli.app.main: option parsing, the lock,
# the write) 200 times in a row; one process per call would spend the test's time on imports.
WRITER = r"""
import sys, time
from memctl.cli.app import main
root = sys.argv[1]
for n in range(200):
    try:
        main(["--root", root, "remember", f"concurrent note {n}: ticket #{n}", "--type", "event", "--wait", "10"])
    except SystemExit as exc:
        if exc.code:
            print(f"FAIL {n} {exc.code}", flush=True)
            continue
    sys.stdout.flush()
"""


@pytest.mark.slow
def test_remember_200_times_during_a_dream_over_13000_entries(memctl_bin, root):
    subprocess.run([memctl_bin, "--root", str(root), "init"], check=True, capture_output=True)
    entries, _ = bench_module().make_entries(ENTRIES)
    (root / "long_term.jsonl").write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries),
                                          encoding="utf-8")
    (root / "memctl.toml").write_text("[dream]\nauto_trigger_entries = 1000000\n")
    env = clean_env(MEMCTL_NOW=NOW)
    dream = subprocess.Popen([memctl_bin, "--root", str(root), "dream", "--force", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    writer = subprocess.Popen([str(Path(memctl_bin).with_name("python")), "-c", WRITER, str(root)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    ids, failures, during = [], [], []
    for raw in writer.stdout:  # one line per finished remember: its id, or FAIL
        line = raw.decode().strip()
        during.append(dream.poll() is None)
        (failures if line.startswith("FAIL") else ids).append(line)
    assert writer.wait(timeout=600) == 0, writer.stderr.read()
    # and one more through the console script itself, as a user would call it
    cli = subprocess.run([memctl_bin, "--root", str(root), "remember", "one more from the shell", "--type", "event"],
                         capture_output=True, env=env)
    assert cli.returncode == 0, cli.stderr
    out, err = dream.communicate(timeout=600)
    assert dream.returncode == 0, err
    assert failures == []
    assert len(set(ids)) == 200
    report = json.loads(out)
    assert report["counts"]["consolidate"] > 0 and report["steps"] >= 2
    # remembers finished while the dream was still running: none waited for all of it
    assert any(during)
    l5 = [json.loads(x) for x in (root / "long_term.jsonl").read_text(encoding="utf-8").splitlines()]
    assert set(ids) | {cli.stdout.decode().strip()} <= {e["id"] for e in l5}
    for name in ("long_term.jsonl", "archive.jsonl", "dream_log.jsonl"):
        assert parses(root / name) > 0
