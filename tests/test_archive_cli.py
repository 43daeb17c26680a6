"""Command-line details of the L4 cycle: the fixed clock, partial failures, the demo."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from datetime import datetime

from memctl.l4 import loggen
from l4_helpers import assert_all_recoverable, make_folder
from conftest import clean_env


def test_memctl_now_decides_what_is_live(run, tmp_path):
    folder = make_folder(tmp_path)
    path = folder.add_log("model_responses_1.txt", loggen.format_a(datetime(2026, 4, 5, 9, 0), 1, random.Random(1)))
    mtime = datetime.fromtimestamp(path.stat().st_mtime)
    one_hour_later = (mtime.replace(microsecond=0).timestamp() + 3600)
    env = {"MEMCTL_NOW": datetime.fromtimestamp(one_hour_later).isoformat()}
    early = run("archive", folder.raw_dir, "--keep-newest", "0", "--json", root=folder.root, env=env)
    assert json.loads(early.stdout)["new_sessions"] == 0
    env = {"MEMCTL_NOW": datetime.fromtimestamp(one_hour_later + 2 * 3600).isoformat()}
    late = run("archive", folder.raw_dir, "--keep-newest", "0", "--json", root=folder.root, env=env)
    assert json.loads(late.stdout)["new_sessions"] == 1
    bad = run("archive", folder.raw_dir, root=folder.root, env={"MEMCTL_NOW": "yesterday-ish"})
    assert bad.returncode == 2 and b"MEMCTL_NOW" in bad.stderr


def test_a_failed_month_is_a_partial_run_exit_3(run, tmp_path):
    folder = make_folder(tmp_path)
    folder.add_log("model_responses_1.txt", loggen.format_a(datetime(2026, 4, 5, 9, 0), 1, random.Random(1)))
    folder.add_log("model_responses_2.txt", loggen.format_b(datetime(2026, 5, 5, 9, 0), 1, random.Random(2)))
    folder.l4.mkdir(parents=True)
    (folder.l4 / "2026-04.zip").write_bytes(b"garbage")
    result = run("archive", folder.raw_dir, "--keep-newest", "0", "--json", root=folder.root)
    assert result.returncode == 3
    report = json.loads(result.stdout)
    assert report["months"] == ["2026-05"] and len(report["errors"]) == 1
    assert (folder.raw_dir / "model_responses_1.txt").exists()
    assert not (folder.raw_dir / "model_responses_2.txt").exists()
    assert (folder.l4 / "2026-04.zip").read_bytes() == b"garbage"  # never overwritten
    assert_all_recoverable(run, folder)


def test_rewritten_log_with_one_timestamp_is_archived(run, tmp_path):
    folder = make_folder(tmp_path)
    text = loggen.format_b(datetime(2026, 4, 5, 9, 0), 3, random.Random(3))
    rewritten = "\n".join(
        "=== " + line[4:].split(" === ")[0] + " === 2026-04-06 12:00:00" + (" model=x" if "Response" in line else "")
        if line.startswith("=== Prompt === ") or line.startswith("=== Response === ") else line
        for line in text.split("\n"))
    folder.add_log("model_responses_3.txt", rewritten)
    result = run("archive", folder.raw_dir, "--keep-newest", "0", "--json", root=folder.root)
    assert result.returncode == 0
    assert folder.manifest()[0]["name"] == "0406_1200-0406_1200"
    assert folder.manifest()[0]["entries"] == 8
    assert_all_recoverable(run, folder)


def test_manifest_can_be_rebuilt_from_the_zips(run, tmp_path, sample_logs):
    from memctl.core.config import Layout
    from memctl.l4.manifest import rebuild_from_zips

    folder = make_folder(tmp_path)
    for path in sample_logs:
        folder.add_log(path.name, path.read_bytes())
    run("archive", folder.raw_dir, "--keep-newest", "0", root=folder.root)
    before = folder.manifest()
    (folder.l4 / "manifest.jsonl").unlink()
    rebuilt = rebuild_from_zips(Layout(folder.root))
    assert sorted(r.sha256 for r in rebuilt) == sorted(r["sha256"] for r in before)
    assert_all_recoverable(run, folder)


def test_demo_runs_end_to_end(run, tmp_path):
    result = run("demo", "--dir", tmp_path / "demo")
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    assert out.count("identical to the original") == 2 and "DIFFERENT" not in out
    assert "[Agent] todo.txt 已更新" in out


def test_python_dash_m_and_help(tmp_path):
    result = subprocess.run([sys.executable, "-m", "memctl", "archive", "--help"], capture_output=True,
                            env=clean_env(), timeout=60)
    assert result.returncode == 0
    assert b"--dry-run" in result.stdout and b"--keep-newest" in result.stdout


def test_piped_output_closed_early_is_quiet(memctl_bin, tmp_path):
    folder = make_folder(tmp_path)
    for number in range(30):
        folder.add_log(f"model_responses_{number}.txt", "=== Prompt === 2026-04-05 09:00:00\nhi\n\n", age_hours=0)
    command = f"'{memctl_bin}' --root '{folder.root}' archive '{folder.raw_dir}' --dry-run | head -1"
    result = subprocess.run(["bash", "-c", command], capture_output=True, env=clean_env(), timeout=60)
    assert result.stdout.count(b"\n") == 1
    assert b"Traceback" not in result.stderr
