"""Long runs draw one updating progress line on a terminal (stderr a tty), nothing on a pipe,
and the per-item lines with -v (issue #32)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

from conftest import clean_env
from terminal import in_terminal

from memctl.cli.progress import ProgressLine

SAMPLES = Path(__file__).resolve().parent.parent / "memctl" / "samples"


def test_the_line_is_redrawn_in_place_and_erased_at_the_end():
    stream = io.StringIO()
    with ProgressLine("archive", "logs", stream=stream, terminal=True) as line:
        for done in range(1, 4):
            line.update(done, 3, f"[{done}/3] reading log{done}.txt")
    text = stream.getvalue()
    assert "\n" not in text and text.startswith("\rarchive: 1/3 logs") and text.endswith("\r\x1b[K")
    assert "archive: 3/3 logs" in text  # the last count is always drawn, however soon it comes


def test_off_a_terminal_nothing_is_drawn_and_verbose_prints_each_item():
    quiet, verbose = io.StringIO(), io.StringIO()
    for stream, flag in ((quiet, False), (verbose, True)):
        with ProgressLine("import", "lines read", stream=stream, terminal=False, verbose=flag) as line:
            line.update(0, 2)
            line.update(1, 2, "first.txt")
            line.update(2, 2)
    assert quiet.getvalue() == ""
    printed = verbose.getvalue().splitlines()
    assert len(printed) == 2 and printed[0] == "first.txt" and printed[1].startswith("import: 2/2 lines read")


def _memory_with_logs(run, tmp_path: Path, copies: int = 4) -> Path:
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    raw = tmp_path / "temp" / "model_responses"
    raw.mkdir(parents=True)
    for number in range(copies):
        for sample in SAMPLES.glob("model_responses_*.txt"):
            shutil.copy(sample, raw / f"{sample.stem}{number}.txt")
    return root


def test_archive_on_a_terminal_draws_one_line_not_a_line_per_log(run, memctl_bin, tmp_path):
    root = _memory_with_logs(run, tmp_path)
    args = [memctl_bin, "--root", str(root), "archive", "--min-age", "0s", "--keep-newest", "0", "--dry-run"]
    status, screen = in_terminal(args, clean_env(), columns=120, raw=True)
    assert status == 0, screen
    assert "\rarchive: " in screen and " logs" in screen, screen
    lines = screen.replace("\r\n", "\n").split("\n")
    assert not [line for line in lines if line.lstrip("\r").startswith("[")], lines  # no scrolled per-log lines
    status, verbose = in_terminal(args + ["-v"], clean_env(), columns=120)
    assert status == 0 and "[1/8] reading model_responses_" in verbose, verbose


def test_archive_on_a_pipe_prints_no_progress_unless_verbose(run, memctl_bin, tmp_path):
    root = _memory_with_logs(run, tmp_path)
    args = ["archive", "--min-age", "0s", "--keep-newest", "0", "--dry-run"]
    piped = run(*args, root=root)
    assert piped.returncode == 0 and b"\r" not in piped.stderr and b"reading" not in piped.stderr, piped.stderr
    verbose = run(*args, "-v", root=root)
    assert verbose.returncode == 0 and verbose.stderr.count(b"reading model_responses_") == 8, verbose.stderr
    assert b"\r" not in verbose.stderr


def test_import_shows_its_progress_on_a_terminal_only(run, memctl_bin, tmp_path):
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"text": f"item {n} about the nightly backup"}) + "\n" for n in range(1200)))
    status, screen = in_terminal([memctl_bin, "--root", str(root), "import", str(items)], clean_env(),
                                 columns=120, raw=True)
    assert status == 0 and "\rimport: 1200/1200 lines read" in screen and "checked against L6" in screen, screen
    assert screen.rstrip().endswith("imported 1200 item(s) into L6; 0 bad line(s)"), screen
    again = subprocess.run([memctl_bin, "--root", str(root), "import", str(items)], capture_output=True,
                           env=clean_env(), timeout=120)
    assert again.returncode == 0 and again.stderr == b"imported 0 item(s) into L6; 0 bad line(s)\n", again.stderr


def test_index_rebuild_shows_its_sources_on_a_terminal_only(run, memctl_bin, tmp_path):
    """Both paths: the lean one (`index rebuild`) and the full command line (`-v`)."""
    root = tmp_path / "demo" / "memory"
    assert run("demo", "--dir", str(tmp_path / "demo")).returncode == 0
    status, screen = in_terminal([memctl_bin, "--root", str(root), "index", "rebuild"], clean_env(), columns=120,
                                 raw=True)
    assert status == 0 and "\rindex rebuild: " in screen and " sources" in screen, screen
    assert screen.rstrip().split("\x1b[K")[-1].lstrip("\r").startswith("indexed "), screen
    piped = run("index", "rebuild", root=root)
    assert piped.returncode == 0 and piped.stderr.startswith(b"indexed ") and b"\r" not in piped.stderr
    verbose = run("index", "rebuild", "-v", root=root)
    assert verbose.returncode == 0 and b"long_term.jsonl\n" in verbose.stderr and b".zip\n" in verbose.stderr


def test_dream_shows_its_changes_on_a_terminal_only(run, memctl_bin, tmp_path):
    items = tmp_path / "old.jsonl"
    items.write_text("".join(json.dumps({"text": f"old fact {n}", "date": "2020-01-02"}) + "\n" for n in range(300)))
    screens = []
    for name in ("terminal", "pipe"):
        root = tmp_path / name
        assert run("init", root=root).returncode == 0
        assert run("import", str(items), "--layer", "L5", root=root).returncode == 0
        if name == "terminal":
            status, screen = in_terminal([memctl_bin, "--root", str(root), "dream", "--force"], clean_env(),
                                         columns=120, raw=True)
            assert status == 0 and "\rdream: 300/300 changes" in screen, screen
            screens.append(screen)
        else:
            piped = run("dream", "--force", root=root)
            assert piped.returncode == 0 and b"\r" not in piped.stderr and b"archive 300" in piped.stderr
    assert "archive 300" in screens[0]
