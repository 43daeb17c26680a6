"""One test per defect of GenericAgent's reference archiver (samples/genericagent/README.md),
each proving memctl does not have it. All run the installed `memctl` on real folders."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import subprocess
import time
import zipfile
from datetime import datetime

from memctl.l4 import loggen
from l4_helpers import assert_all_recoverable, make_folder, raw_sha_from_show, zips_readable
from conftest import clean_env


def archive(run, folder, *extra, env=None):
    return run("archive", str(folder.raw_dir), "--keep-newest", "0", "--json", *extra, root=folder.root, env=env)


def test_defect1_unparseable_tiny_and_duplicate_named_files_are_archived_not_dropped(run, tmp_path):
    folder = make_folder(tmp_path)
    rng = random.Random(1)
    folder.add_log("model_responses_000001.txt", os.urandom(3000) + b"\x00binary")
    folder.add_log("model_responses_000002.txt", "no markers here, just a note\n")
    folder.add_log("model_responses_000003.txt", loggen.no_tool_session(datetime(2026, 3, 1, 9, 0), "hi", "ok"))
    same_minute = datetime(2026, 3, 2, 10, 0, 5)
    folder.add_log("model_responses_000004.txt", loggen.format_a(same_minute, 1, rng, 100))
    folder.add_log("model_responses_000005.txt", loggen.format_a(same_minute, 1, random.Random(2), 100))
    result = archive(run, folder)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["new_sessions"] == 5 and report["deleted_raw"] == 5
    assert len({r["name"] for r in folder.manifest()}) == 5
    assert_all_recoverable(run, folder)


def test_defect2_same_name_never_overwrites_and_a_year_apart_is_not_a_duplicate(run, tmp_path):
    folder = make_folder(tmp_path)
    for number, year in enumerate((2025, 2026, 2026)):
        folder.add_log(f"model_responses_10000{number}.txt",
                       loggen.format_b(datetime(year, 4, 3, 20, 13, 0), 1, random.Random(0), 50, request=f"task {number}"))
    assert archive(run, folder).returncode == 0
    records = folder.manifest()
    base = records[0]["name"]
    assert sorted(r["name"] for r in records) == [base, base + "_2", base + "_3"]
    assert sorted({r["zip"] for r in records}) == ["2025-04.zip", "2026-04.zip"]
    assert all(r["start"].startswith(("2025-", "2026-")) for r in records)
    assert_all_recoverable(run, folder)


def test_defect3_history_is_written_only_after_the_zip_is_verified(run, tmp_path):
    folder = make_folder(tmp_path)
    folder.add_log("model_responses_200001.txt", loggen.format_a(datetime(2026, 4, 1, 8, 0), 3, random.Random(3)))
    folder.l4.mkdir(parents=True)
    (folder.l4 / "2026-04.zip").write_bytes(b"PK\x03\x04 this is not a zip")  # the month's zip cannot be rebuilt
    result = archive(run, folder)
    assert result.returncode == 2
    assert not (folder.l4 / "all_histories.txt").exists()
    assert (folder.raw_dir / "model_responses_200001.txt").exists()
    assert folder.manifest() == []
    (folder.l4 / "2026-04.zip").unlink()
    assert archive(run, folder).returncode == 0
    assert folder.history_sessions() == [folder.manifest()[0]["name"]]


def test_defect4_a_monthly_zip_is_never_modified_in_place(run, tmp_path):
    folder = make_folder(tmp_path)
    folder.add_log("model_responses_300001.txt", loggen.format_a(datetime(2026, 4, 1, 8, 0), 2, random.Random(4)))
    assert archive(run, folder).returncode == 0
    zip_path = folder.l4 / "2026-04.zip"
    before, inode = zip_path.read_bytes(), zip_path.stat().st_ino
    folder.add_log("model_responses_300002.txt", loggen.format_b(datetime(2026, 4, 2, 8, 0), 2, random.Random(5)))
    killed = archive(run, folder, env={"MEMCTL_FAULT_AFTER": "2"})  # dies after writing the new member
    assert killed.returncode == -9
    assert zip_path.read_bytes() == before and zip_path.stat().st_ino == inode
    assert archive(run, folder).returncode == 0
    with zipfile.ZipFile(zip_path) as archive_file:
        assert len(archive_file.namelist()) == 2 and archive_file.testzip() is None
    assert zip_path.stat().st_ino != inode  # replaced by rename, not rewritten
    assert_all_recoverable(run, folder)


def test_defect5_one_writer_at_a_time(run, memctl_bin, tmp_path):
    folder = make_folder(tmp_path)
    for number in range(40):
        folder.add_log(f"model_responses_4{number:05d}.txt",
                       loggen.format_b(datetime(2026, 4, 1 + number % 20, 8, number), 40, random.Random(number), 40000))
    (folder.root / ".memctl").mkdir(parents=True, exist_ok=True)
    lock_path = folder.root / ".memctl" / "lock"
    args = [memctl_bin, "--root", str(folder.root), "archive", str(folder.raw_dir), "--keep-newest", "0", "--json"]
    first = subprocess.Popen(args, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert _wait_until_locked(lock_path, first)
    second = subprocess.run(args, env=clean_env(), capture_output=True, timeout=60)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert second.returncode == 75
    assert b"lock busy" in second.stderr and second.stdout == b""
    names = folder.history_sessions()
    assert len(names) == len(set(names)) == 40
    with zipfile.ZipFile(folder.l4 / "2026-04.zip") as archive_file:
        assert len(archive_file.namelist()) == len(set(archive_file.namelist())) == 40


def _wait_until_locked(lock_path, process, timeout=30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if lock_path.exists():
            fd = os.open(lock_path, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
            except BlockingIOError:
                return True
            finally:
                os.close(fd)
        time.sleep(0.005)
    return False


def test_defect6_undecodable_bytes_are_kept_and_a_bad_history_byte_does_not_stop_runs(run, tmp_path):
    folder = make_folder(tmp_path)
    text = loggen.format_b(datetime(2026, 4, 5, 9, 0), 2, random.Random(6), tool_text="caf\xe9 latin-1 here")
    raw = text.encode("utf-8").replace("caf\xe9".encode("utf-8"), b"caf\xe9\xff\xfe")
    folder.add_log("model_responses_500001.txt", raw)
    folder.l4.mkdir(parents=True)
    (folder.l4 / "all_histories.txt").write_bytes(b"\n" + b"=" * 60 + b"\nSESSION: old\xff\n" + b"=" * 60 + b"\n[USER]: x\xfe\n")
    assert archive(run, folder).returncode == 0
    name = folder.manifest()[0]["name"]
    assert raw_sha_from_show(run, folder.root, name) == hashlib.sha256(raw).hexdigest()
    assert name in folder.history_sessions()


def test_defect7_history_keeps_final_lines_backslashes_quotes_and_tool_free_sessions(run, tmp_path, sample_logs):
    folder = make_folder(tmp_path)
    for path in sample_logs:
        folder.add_log(path.name, path.read_bytes())
    folder.add_log("model_responses_600001.txt",
                   loggen.no_tool_session(datetime(2026, 4, 6, 9, 0), "What is the capital of France?", "Paris.\nMore detail."))
    assert archive(run, folder).returncode == 0
    history = (folder.l4 / "all_histories.txt").read_text(encoding="utf-8")
    assert '[USER]: 把 D:\\notes\\weekly 里上周的会议纪要整理成 "summary.md"，按项目分组' in history
    assert "[Agent] todo.txt 已更新" in history  # the final summary, never echoed into a later prompt
    assert "[Agent] Root cause: stale key after rotation; archive unusable" in history
    assert '\\"' not in history and "[USER]: 把 D:\\\n" not in history
    assert "[USER]: What is the capital of France?\n[Agent] Paris." in history


def test_defect8_markers_inside_tool_output_are_not_markers(run, tmp_path, sample_logs):
    folder = make_folder(tmp_path)
    other_log = sample_logs[0].read_text(encoding="utf-8")  # an agent that cat'ed another log
    text = loggen.format_b(datetime(2026, 4, 7, 9, 0), 2, random.Random(8), tool_text="\n" + other_log)
    folder.add_log("model_responses_700001.txt", text)
    assert archive(run, folder).returncode == 0
    record = folder.manifest()[0]
    assert record["entries"] == 6  # 3 prompts + 3 responses, none from the quoted log
    assert record["name"] == "0407_0900-0407_0901" or record["name"].startswith("0407_09")
    assert "2026-04-03" not in record["start"]
    assert raw_sha_from_show(run, folder.root, record["name"]) == folder.originals["model_responses_700001.txt"]


def test_defect9_format_is_decided_per_entry_and_order_survives_a_new_year(run, tmp_path):
    folder = make_folder(tmp_path)
    mixed = (loggen.format_a(datetime(2025, 12, 31, 23, 50), 1, random.Random(9), 100)
             + loggen.format_b(datetime(2025, 12, 31, 23, 59), 1, random.Random(10), 100))
    folder.add_log("model_responses_800001.txt", mixed)
    folder.add_log("model_responses_800002.txt", loggen.format_a(datetime(2026, 1, 1, 0, 5), 1, random.Random(11), 100))
    assert archive(run, folder).returncode == 0
    records = {r["source"]: r for r in folder.manifest()}
    assert records["model_responses_800001.txt"]["format"] == "A+B"
    assert records["model_responses_800001.txt"]["zip"] == "2025-12.zip"
    assert records["model_responses_800002.txt"]["zip"] == "2026-01.zip"
    assert records["model_responses_800001.txt"]["start"] < records["model_responses_800002.txt"]["start"]
    history = (folder.l4 / "all_histories.txt").read_text(encoding="utf-8")
    assert history.count("[USER]: ") == 3  # requests from both formats of the mixed log


def test_defect10_live_logs_are_never_touched_and_a_continuation_is_kept_as_one(run, tmp_path):
    folder = make_folder(tmp_path)
    rng = random.Random(12)
    folder.add_log("model_responses_900001.txt", loggen.format_a(datetime(2026, 4, 8, 9, 0), 2, rng), age_hours=0.5)
    folder.add_log("model_responses_900002.txt", loggen.format_a(datetime(2026, 4, 8, 10, 0), 2, rng), age_hours=5)
    folder.add_log("model_responses_900003.txt", loggen.format_a(datetime(2026, 4, 8, 11, 0), 2, rng), age_hours=1)
    result = run("archive", str(folder.raw_dir), "--keep-newest", "1", "--json", root=folder.root)
    report = json.loads(result.stdout)
    assert report["new_sessions"] == 1
    reasons = {os.path.basename(f["path"]): f["reason"] for f in report["files"]}
    assert "newest" in reasons["model_responses_900001.txt"]
    assert "--min-age" in reasons["model_responses_900003.txt"]
    assert (folder.raw_dir / "model_responses_900001.txt").exists()
    assert (folder.raw_dir / "model_responses_900003.txt").exists()
    # The agent process lives on and recreates its log with only the later turns.
    later = loggen.format_a(datetime(2026, 4, 8, 15, 0), 2, random.Random(13))
    folder.add_log("model_responses_900002.txt", later, age_hours=3)
    assert archive(run, folder).returncode == 0
    records = [r for r in folder.manifest() if r["source"] == "model_responses_900002.txt"]
    assert len(records) == 2
    first, second = sorted(records, key=lambda r: r["start"])
    assert second["continues"] == first["name"] and first["name"] != second["name"]
    assert raw_sha_from_show(run, folder.root, second["name"]) == hashlib.sha256(later.encode()).hexdigest()
    assert raw_sha_from_show(run, folder.root, first["name"]) != raw_sha_from_show(run, folder.root, second["name"])
    zips_readable(folder.l4)
