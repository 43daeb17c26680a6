"""Crash safety, idempotence, dry runs, GenericAgent compatibility and hostile input for the
L4 cycle, with real processes, real zips and SIGKILL."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import zipfile
from datetime import datetime, timedelta

import pytest

from memctl.l4 import loggen
from l4_helpers import assert_all_recoverable, make_folder, raw_sha_from_show, snapshot, zips_readable
from conftest import SAMPLES


def _make_fifty() -> list[str]:
    rng = random.Random(50)
    start = datetime(2026, 3, 28, 8, 0)
    return [(loggen.format_a if n % 2 else loggen.format_b)(start + timedelta(days=n % 8, minutes=n), 2, rng, 300)
            for n in range(50)]


FIFTY = _make_fifty()  # sessions spread over two months (March and April)


def _fifty_sessions(folder):
    for number, text in enumerate(FIFTY):
        folder.add_log(f"model_responses_{number:06d}.txt", text)


def archive(run, folder, *extra, env=None):
    return run("archive", str(folder.raw_dir), "--keep-newest", "0", "--json", *extra, root=folder.root, env=env)


def test_archive_survives_sigkill_at_every_step(run, forked, tmp_path):
    pristine = make_folder(tmp_path / "pristine")
    _fifty_sessions(pristine)
    full = archive(run, pristine)
    assert full.returncode == 0
    # checkpoints in one full run: per month a copy, a member per session, fsync and replace;
    # then manifest, history and one per deleted raw file.
    kill_points = [1, 2, 5, 13, 30, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 60, 64, 75, 90, 100, 104, 108]
    killed_at = 0
    for point in kill_points:
        # the first kill goes through the installed `memctl`, the others through children forked
        # from an interpreter that has imported memctl already (tests/forkserver.py)
        runner = run if point == kill_points[0] else forked
        folder = make_folder(tmp_path / f"kill{point}")
        _fifty_sessions(folder)
        first = archive(runner, folder, env={"MEMCTL_FAULT_AFTER": str(point)})
        if first.returncode == -9:
            killed_at += 1
            zips_readable(folder.l4)
            assert_all_recoverable(runner, folder, via_cli=False)  # whole even before the rerun
        again = archive(runner, folder)
        assert again.returncode == 0, again.stderr
        assert not list(folder.raw_dir.iterdir())
        names = folder.history_sessions()
        assert len(names) == len(set(names)) == 50
        assert len({r["sha256"] for r in folder.manifest()}) == len(folder.manifest()) == 50
        members = []
        for zip_path in folder.l4.glob("*.zip"):
            with zipfile.ZipFile(zip_path) as archive_file:
                assert archive_file.testzip() is None
                members += archive_file.namelist()
        assert len(members) == len(set(members)) == 50
        assert not [p for p in folder.l4.iterdir() if p.name.endswith(".tmp")]
        assert_all_recoverable(runner, folder, via_cli=point == kill_points[-1])
    by_name = {r["source"]: r for r in folder.manifest()}
    first_session = min(by_name)
    assert raw_sha_from_show(run, folder.root, by_name[first_session]["name"]) == folder.originals[first_session]
    assert killed_at >= 20


def test_second_archive_changes_no_byte(run, tmp_path):
    folder = make_folder(tmp_path)
    _fifty_sessions(folder)
    folder.add_log("model_responses_live.txt", "=== Prompt === 2026-04-09 10:00:00\nstill running\n\n", age_hours=0)
    assert archive(run, folder).returncode == 0
    before = snapshot(folder.root, folder.raw_dir)
    second = archive(run, folder)
    assert second.returncode == 0
    assert json.loads(second.stdout)["new_sessions"] == 0
    assert snapshot(folder.root, folder.raw_dir) == before


def test_dry_run_changes_nothing_and_explains_every_file(run, tmp_path):
    folder = make_folder(tmp_path)
    _fifty_sessions(folder)
    folder.add_log("model_responses_live.txt", "=== Prompt === 2026-04-09 10:00:00\nstill running\n\n", age_hours=0)
    os.symlink("/etc/hostname", folder.raw_dir / "model_responses_link.txt")
    before = snapshot(folder.base)
    result = run("archive", str(folder.raw_dir), "--keep-newest", "0", "--dry-run", root=folder.root)
    assert result.returncode == 0
    assert snapshot(folder.base) == before
    lines = result.stdout.decode().splitlines()
    assert len(lines) == 52
    by_file = {line.split("\t")[1].rsplit("/", 1)[1]: line for line in lines}
    assert by_file["model_responses_live.txt"].startswith("skip\t") and "min-age" in by_file["model_responses_live.txt"]
    assert "symlink" in by_file["model_responses_link.txt"]
    assert by_file["model_responses_000000.txt"].startswith("would archive\t")
    assert "deleted after verification" in by_file["model_responses_000000.txt"]
    as_json = json.loads(run("archive", str(folder.raw_dir), "--keep-newest", "0", "--dry-run", "--json",
                             root=folder.root).stdout)
    assert as_json["dry_run"] and as_json["new_sessions"] == 50 and as_json["deleted_raw"] == 0
    assert snapshot(folder.base) == before


def test_genericagent_checkout_works_as_it_is(run, tmp_path):
    base = tmp_path / "GenericAgent"
    (base / "memory").mkdir(parents=True)
    raw_dir = base / "temp" / "model_responses"
    raw_dir.mkdir(parents=True)
    shutil.copy(SAMPLES.parent.parent / "memctl" / "samples" / "model_responses_483920.txt", raw_dir)
    shutil.copy(SAMPLES / "model_responses_571204.txt", raw_dir)
    days_ago = datetime.now().timestamp() - 3 * 86400
    for path in raw_dir.iterdir():
        os.utime(path, (days_ago, days_ago))
    result = run("archive", "--keep-newest", "0", cwd=base)
    assert result.returncode == 0, result.stderr
    l4 = base / "memory" / "L4_raw_sessions"
    history = (l4 / "all_histories.txt").read_text(encoding="utf-8")
    blocks = history.split("\n" + "=" * 60 + "\nSESSION: ")
    assert blocks[0] == "" and len(blocks) == 3
    for block in blocks[1:]:
        name, rest = block.split("\n", 1)
        assert rest.startswith("=" * 60 + "\n")
        assert len(name) == len("0403_2013-0403_2029")
    assert "[Agent] todo.txt 已更新" in history and "[Agent] Root cause: stale key after rotation" in history
    assert "D:\\notes\\weekly" in history
    with zipfile.ZipFile(l4 / "2026-04.zip") as archive_file:
        # GenericAgent's names (first and last Prompt), as in its own L4_raw_sessions_example
        assert sorted(archive_file.namelist()) == ["0403_2013-0403_2028.txt", "0405_0902-0405_0908.txt"]
        member = archive_file.read("0405_0902-0405_0908.txt").decode()
    assert "=== Response === 2026-04-05 09:09:44 model=deepseek-chat" in member
    assert "=== ASSISTANT ===" not in member  # the empty echo is dropped, reversibly
    assert not list(raw_dir.iterdir())


def test_show_raw_and_compressed(run, tmp_path, sample_logs):
    folder = make_folder(tmp_path)
    for path in sample_logs:
        folder.add_log(path.name, path.read_bytes())
    assert archive(run, folder).returncode == 0
    for record in folder.manifest():
        assert raw_sha_from_show(run, folder.root, record["name"]) == record["sha256"]
        assert raw_sha_from_show(run, folder.root, record["sha256"][:12]) == record["sha256"]
    text = run("show", folder.manifest()[0]["name"], root=folder.root)
    assert text.returncode == 0 and text.stdout.startswith("⟪memctl-session v2⟫".encode())
    missing = run("show", "0101_0000-0101_0001", root=folder.root)
    assert missing.returncode == 2 and b"no archived session" in missing.stderr
    hostile = run("show", "../../etc/passwd", root=folder.root)
    assert hostile.returncode == 2 and len(hostile.stderr.splitlines()) == 1


def test_compress_keeps_input_and_reports_sizes(run, tmp_path, sample_logs):
    root = tmp_path / "memory"
    run("init", root=root)
    inputs = [tmp_path / p.name for p in sample_logs]
    for source, copy in zip(sample_logs, inputs):
        shutil.copy(source, copy)
    result = run("compress", *inputs, root=root)
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.decode().splitlines()]
    assert len(rows) == 2 and all(row[5] == "written" for row in rows)
    for row, source in zip(rows, inputs):
        assert source.exists()
        assert int(row[2]) == source.stat().st_size and int(row[3]) > 0
        assert (root / "L4_raw_sessions" / os.path.basename(row[1])).exists()
    again = run("compress", *inputs, "--json", root=root)
    assert [json.loads(line)["status"] for line in again.stdout.splitlines()] == ["unchanged", "unchanged"]
    name = os.path.basename(rows[0][1])[:-4]
    assert raw_sha_from_show(run, root, name) == hashlib.sha256(inputs[0].read_bytes()).hexdigest()


@pytest.mark.parametrize("kind", ["truncated", "binary", "invalid-utf8", "huge-line", "crlf", "prompt-only"])
def test_bad_input_is_archived_exactly(run, tmp_path, kind):
    folder = make_folder(tmp_path)
    good = loggen.format_b(datetime(2026, 4, 10, 9, 0), 3, random.Random(7)).encode()
    data = {
        "truncated": good[: len(good) // 2 + 17],
        "binary": bytes(range(256)) * 40,
        "invalid-utf8": good.replace(b"Running", b"Run\xc3\x28ning\xff"),
        "huge-line": good + b"=== Prompt === 2026-04-10 10:00:00\n" + b"x" * (8 << 20) + b"\n\n",
        "crlf": good.replace(b"\n", b"\r\n"),
        "prompt-only": b"=== Prompt === 2026-04-10 09:00:00\n{\"role\": \"user\", \"content\": [\n{\"type\": \"text\", \"text\": \"hi\"}]}\n\n",
    }[kind]
    folder.add_log("model_responses_bad.txt", data)
    result = archive(run, folder)
    assert result.returncode == 0, result.stderr
    assert_all_recoverable(run, folder)
    assert not (folder.raw_dir / "model_responses_bad.txt").exists()


def test_symlinks_and_hard_links_in_the_raw_folder_are_left_alone(run, tmp_path):
    folder = make_folder(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text(loggen.format_a(datetime(2026, 4, 11, 9, 0), 1, random.Random(1)))
    os.symlink(outside, folder.raw_dir / "model_responses_link.txt")
    linked = folder.raw_dir / "model_responses_hard.txt"
    os.link(outside, linked)
    old = datetime.now().timestamp() - 86400 * 3
    os.utime(linked, (old, old))
    result = archive(run, folder)
    assert result.returncode == 0
    assert outside.exists() and linked.exists() and (folder.raw_dir / "model_responses_link.txt").is_symlink()
    reasons = [f["reason"] for f in json.loads(result.stdout)["files"]]
    assert any("symlink" in r for r in reasons) and any("hard-linked" in r for r in reasons)


def test_busy_lock_exits_75_at_once_and_wait_waits(run, tmp_path):
    from memctl.core.fsutil import WriterLock

    folder = make_folder(tmp_path)
    with WriterLock(folder.root / ".memctl" / "lock"):
        busy = archive(run, folder)
        assert busy.returncode == 75 and b"lock busy" in busy.stderr
    assert archive(run, folder, "--wait", "5").returncode == 0


def test_missing_raw_folder_is_a_clear_error(run, tmp_path):
    assert run("init", root=tmp_path / "memory").returncode == 0
    result = run("archive", str(tmp_path / "nope"), root=tmp_path / "memory")
    assert result.returncode == 2
    assert b"does not exist" in result.stderr and b"Traceback" not in result.stderr
