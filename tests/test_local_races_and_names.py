"""Issue #32, open since the first report: a raw log whose name is not UTF-8 blocked every
`archive` run (the manifest records the name as text); `verify` exited 3 while writers ran when
a task file disappeared between the listing of the files to scan and their reading."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from conftest import SAMPLES

from memctl.core.config import load_settings
from memctl.ops import integrity

BAD_NAME = os.fsdecode(b"model_responses_\xff\xfe.txt")


@pytest.mark.skipif(sys.platform == "darwin", reason="APFS refuses names that are not UTF-8")
@pytest.mark.parametrize("full", ["0", "1"], ids=["lean", "full command line"])
def test_a_raw_log_whose_name_is_not_utf8_is_one_error_and_the_others_are_archived(run, tmp_path, full):
    checkout = tmp_path / "agent"
    root, raw = checkout / "memory", checkout / "temp" / "model_responses"
    raw.mkdir(parents=True)
    assert run("init", root=root).returncode == 0
    good = sorted(SAMPLES.glob("model_responses_*.txt"))
    shutil.copy(good[0], raw / good[0].name)
    shutil.copy(good[1], raw / BAD_NAME)
    for name in os.listdir(raw):
        os.utime(raw / name, (1, 1))
    env = {"MEMCTL_FULL_CLI": full}
    for _ in range(2):  # the second run: the bad name still reported, nothing else to do
        done = run("archive", "--keep-newest", "0", "--json", root=root, env=env)
        assert b"Traceback" not in done.stderr and b"internal error" not in done.stderr, done.stderr
        report = json.loads(done.stdout)
        errors = [item for item in report["files"] if item["action"] == "error"]
        assert len(errors) == 1 and errors[0]["reason"] == "its name is not UTF-8; rename it to archive it", report
        assert done.returncode == (3 if report["processed"] else 2), done
    assert sorted(os.listdir(raw)) == [BAD_NAME]  # the good log archived and deleted, the other kept
    assert list((root / "L4_raw_sessions").glob("*.zip"))
    assert run("verify", root=root).returncode == 0


def test_a_file_gone_between_the_listing_and_the_secret_scan_is_no_finding(run, tmp_path, monkeypatch):
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    assert run("task", "save", "t1", root=root, input=b'{"step": 1}').returncode == 0
    layout = load_settings(root).layout
    listed = integrity.secret_scan_files(layout)
    task_file = root / "working" / "t1.json"
    assert task_file in listed
    task_file.unlink()  # a `task done` between the listing and the read
    monkeypatch.setattr(integrity, "secret_scan_files", lambda _layout: listed)
    report = integrity.verify(layout)
    assert [finding for finding in report.findings if finding.kind == "secret"] == []


def test_a_crash_on_the_lean_search_path_is_one_line_exit_2(capsys):
    """The lean search path let anything but its known errors through as a traceback (the L5
    topic that was a number); now, as on the full command line, it is one line."""
    from memctl.cli import lean

    def crash() -> int:
        raise RuntimeError("something no one foresaw\nover two lines")

    assert lean._guarded(crash) == 2
    assert capsys.readouterr().err.splitlines() == [
        "memctl: error: internal error: something no one foresaw over two lines (rerun with --debug for a traceback)"]


def test_pread_without_os_pread_reads_what_os_pread_reads(tmp_path, monkeypatch):
    """Windows has no os.pread: the JSON Lines appends read their file's last byte through
    fsutil.pread, a seek and reads there."""
    from memctl.core import fsutil

    path = tmp_path / "lines.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": 2}\ntorn')
    fd = os.open(path, os.O_RDONLY)
    try:
        cases = [(1, 8), (9, 9), (100, 14), (4, 18), (5, 0), (3, 40)]
        expected = [os.pread(fd, size, offset) for size, offset in cases]
        monkeypatch.delattr(os, "pread")
        assert [fsutil.pread(fd, size, offset) for size, offset in cases] == expected
    finally:
        os.close(fd)
