"""`forget --purge` over the raw logs memctl has not archived yet (issue 32): GenericAgent's
`temp/model_responses/*.txt`, searched where they lie, and their kept copies in
`.memctl/kept-raw/`. The purge scrubs both — atomically, the log's mode and mtime kept, an
append by a running GenericAgent never lost — the kept link follows the scrubbed log, the next
`archive` stores each session once, a SIGKILL at any step loses no line that was not purged,
and a full disk is one line with the log intact. GenericAgent's own writer made the logs
(tests/ga_checkout.py)."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from conftest import clean_env
from ga_checkout import make_checkout

SECRET = "orchid-7Hq2-vault"
SECRET_LOG = "model_responses_947226.txt"  # en_raw_short: a text-protocol session
MARK = b"[PURGED]"
# what GenericAgent appends to its log for one more turn (text protocol), the password in it
SECRET_TURN = (
    "=== Prompt === 2026-02-08 08:20:01\n=== USER ===\n"
    f"Remember that the backup vault password is {SECRET} please.\n=== ASSISTANT ===\n\n\n"
    "=== Response === 2026-02-08 08:20:09 model=fake-model\n"
    f"<summary>Noted the vault password {SECRET}</summary>\nStored: {SECRET}.\n\n"
).encode()
LATER_TURN = (
    "=== Prompt === 2026-02-08 08:30:00\n=== USER ===\nAnd the backup host is bk-09.\n=== ASSISTANT ===\n\n\n"
    "=== Response === 2026-02-08 08:30:04 model=fake-model\nNoted: bk-09.\n\n"
).encode()


def _checkout(tmp_path: Path, run, secret_in: tuple[str, ...] = (SECRET_LOG,)):
    """A GenericAgent checkout whose 7 logs are all among the 10 newest (none archived), the
    password appended to `secret_in` as GenericAgent appends a turn, then `memctl init`."""
    checkout = make_checkout(tmp_path)
    checkout.add_real_writer_logs(days=-60)
    for name in secret_in:
        path = checkout.raw_dir / name
        stat = path.stat()
        with open(path, "ab") as log:
            log.write(SECRET_TURN)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    init = run("init", "--no-plugin", cwd=checkout.base)
    assert init.returncode == 0, init.stderr
    return checkout


def _files(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file under `folder`: bytes, inode, mtime."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_ino, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def leaks(folder: Path) -> list[str]:
    found = []
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            if SECRET.encode() in path.read_bytes():
                found.append(str(path))
            if path.suffix == ".zip":
                from test_purge_resume import _decoded

                with zipfile.ZipFile(path) as archive:
                    found += [f"{path}:{n}" for n in archive.namelist() if SECRET.encode() in _decoded(archive.read(n))]
    return found


def _kept(checkout) -> list[Path]:
    return sorted((checkout.memory / ".memctl" / "kept-raw").rglob("model_responses_*"))


def _search(run, checkout, query: str) -> list[dict]:
    found = run("search", query, "-k", "20", "--json", cwd=checkout.base)
    assert found.returncode in (0, 1), found.stderr
    return [json.loads(line) for line in found.stdout.splitlines()]


def _purge(run, checkout, *extra: str, env: dict | None = None):
    return run("forget", "--purge", "--match", SECRET, *extra, cwd=checkout.base, env=env)


def _manifest_records(checkout) -> list[dict]:
    path = checkout.l4 / "manifest.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _archived_sessions(run, checkout) -> int:
    done = run("archive", "--keep-newest", "0", "--json", cwd=checkout.base)
    assert done.returncode == 0, done.stderr
    return len(_manifest_records(checkout))


@pytest.fixture(scope="module")
def sessions_without_purge(tmp_path_factory, forked) -> int:
    """How many sessions `archive` stores from the same logs when nothing was purged."""
    checkout = _checkout(tmp_path_factory.mktemp("control"), forked)
    return _archived_sessions(forked, checkout)


# ---------------------------------------------------------------- the decision: scrub them too


def test_a_purge_scrubs_the_raw_logs_not_archived_yet_and_their_kept_links(tmp_path, run):
    checkout = _checkout(tmp_path, run)
    log = checkout.raw_dir / SECRET_LOG
    if os.geteuid() == 0:  # GenericAgent runs as its user, a purge may run as root: the log stays its user's
        os.chown(log, 65534, 65534, follow_symlinks=False)
    original, before = log.read_bytes(), log.stat()
    assert [h for h in _search(run, checkout, SECRET) if h["ref"] == "L4:model_responses_947226"]
    untouched = _files(checkout.base)

    preview = _purge(run, checkout, "--dry-run", "--json")
    assert preview.returncode == 0, preview.stderr
    would = json.loads(preview.stdout)["would_scrub"]
    assert any(str(log) in line and "raw log" in line for line in would), would
    [kept_before] = [p for p in _kept(checkout) if p.name == SECRET_LOG]
    assert any(str(kept_before) in line for line in would), would
    assert _files(checkout.base) == untouched  # a dry run writes nothing

    done = _purge(run, checkout, "--yes")
    assert done.returncode == 0, done.stderr
    assert str(log).encode() in done.stderr
    assert log.read_bytes() == original.replace(SECRET.encode(), MARK)  # every other line as it was
    after = log.stat()
    assert (after.st_mode, after.st_mtime_ns, after.st_uid, after.st_gid) == \
        (before.st_mode, before.st_mtime_ns, before.st_uid, before.st_gid)
    assert leaks(checkout.base) == []
    for kept in _kept(checkout):  # each kept link is the raw log itself, named by its inode
        raw = checkout.raw_dir / kept.name
        assert os.path.samestat(kept.stat(), raw.stat()) and kept.parent.name == str(raw.stat().st_ino)
    assert len(_kept(checkout)) == 7
    for path, (data, _, _) in untouched.items():  # the other logs: not rewritten
        if path.startswith("temp/") and not path.endswith(SECRET_LOG):
            assert (checkout.base / path).read_bytes() == data

    assert _search(run, checkout, SECRET) == []
    composed = run("compose", "what is the backup vault password", cwd=checkout.base)
    assert b"vault password is [PURGED]" in composed.stdout  # found, scrubbed
    assert composed.returncode == 0 and SECRET.encode() not in composed.stdout
    assert [h for h in _search(run, checkout, "staging postgres db-03") if h["ref"] == "L4:model_responses_947226"]


def test_after_a_purge_the_next_archive_stores_each_session_once(tmp_path, run, sessions_without_purge):
    checkout = _checkout(tmp_path, run)
    assert _purge(run, checkout, "--yes").returncode == 0
    assert _archived_sessions(run, checkout) == sessions_without_purge
    assert _kept(checkout) == [] and leaks(checkout.base) == []
    names = [r["name"] for r in _manifest_records(checkout)]
    assert len(names) == len(set(names))
    assert run("verify", cwd=checkout.base).returncode == 0


def test_a_kept_copy_whose_raw_log_was_deleted_is_scrubbed_in_place(tmp_path, run, sessions_without_purge):
    checkout = _checkout(tmp_path, run)
    (checkout.raw_dir / SECRET_LOG).unlink()  # GenericAgent's own archiver, imported before init
    [orphan] = [p for p in _kept(checkout) if p.name == SECRET_LOG]
    original, mtime = orphan.read_bytes(), orphan.stat().st_mtime_ns

    preview = _purge(run, checkout, "--dry-run")
    assert str(orphan).encode() in preview.stdout
    done = _purge(run, checkout, "--yes")
    assert done.returncode == 0, done.stderr
    assert b"nothing left to purge" not in done.stderr and b"rewrote 1 files" in done.stderr, done.stderr
    assert orphan.read_bytes() == original.replace(SECRET.encode(), MARK) and orphan.stat().st_mtime_ns == mtime
    assert leaks(checkout.base) == [] and _search(run, checkout, SECRET) == []
    assert _archived_sessions(run, checkout) == sessions_without_purge
    assert _kept(checkout) == []


# ---------------------------------------------------------------- beside a GenericAgent that appends


def _append_at(monkeypatch, label: str, log: Path, data: bytes) -> list[str]:
    """At the first checkpoint `label`, append `data` to `log` as GenericAgent does (open, append, close)."""
    from memctl.core import faults

    seen = []

    def checkpoint(name: str) -> None:
        if name == label and not seen:
            seen.append(name)
            with open(log, "ab") as handle:
                handle.write(data)

    monkeypatch.setattr(faults, "checkpoint", checkpoint)
    return seen


@pytest.mark.parametrize("label", ["purge-raw-scrubbed", "purge-raw-swap"])
@pytest.mark.parametrize("turn", [LATER_TURN, SECRET_TURN], ids=["plain-turn", "turn-with-the-password"])
def test_an_append_while_the_log_is_scrubbed_is_not_lost(tmp_path, run, monkeypatch, label, turn):
    """`purge-raw-scrubbed`: the scrubbed copy is written, the log grows before the swap is
    decided (the swap is redone); `purge-raw-swap`: it grows in the moment between that check
    and the rename (the bytes that reached the old file are carried over, scrubbed)."""
    from memctl.core.clock import now
    from memctl.core.config import load_settings
    from memctl.longterm.forget import purge

    checkout = _checkout(tmp_path, run)
    log = checkout.raw_dir / SECRET_LOG
    original = log.read_bytes()
    seen = _append_at(monkeypatch, label, log, turn)
    purge(load_settings(checkout.memory), [], [SECRET], "", now(), 5.0)
    assert seen == [label]
    assert log.read_bytes() == (original + turn).replace(SECRET.encode(), MARK)
    assert leaks(checkout.base) == []
    [kept] = [p for p in _kept(checkout) if p.name == SECRET_LOG]
    assert os.path.samestat(kept.stat(), log.stat())
    assert not [p for p in checkout.raw_dir.iterdir() if p.name.startswith(".")]  # no temp file left


# ---------------------------------------------------------------- SIGKILL at every step


def _copy_checkout(source: Path, target: Path):
    from ga_checkout import Checkout

    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", str(source), str(target)], check=True)  # -a keeps the kept hard links
    return Checkout(target)


def _each_file_whole(checkout, originals: dict[str, bytes]) -> None:
    """Every raw log and kept copy is its log as it was or as scrubbed: never torn, no line lost."""
    for path in [*checkout.raw_dir.glob("model_responses_*"), *_kept(checkout)]:
        before = originals[path.name]
        assert path.read_bytes() in (before, before.replace(SECRET.encode(), MARK)), path


def test_a_purge_killed_at_every_step_loses_no_line_and_tears_no_file(tmp_path, run, forked, sessions_without_purge):
    base = _checkout(tmp_path / "base", run, secret_in=(SECRET_LOG, "model_responses_652075.txt"))
    (base.raw_dir / "model_responses_652075.txt").unlink()  # its kept copy is an orphan now
    originals = {p.name: p.read_bytes() for p in _kept(base)}
    expected = {name: data.replace(SECRET.encode(), MARK) for name, data in originals.items()}
    kills = 0
    for point in range(1, 80):
        checkout = _copy_checkout(base.base, tmp_path / f"kill-{point}" / "GenericAgent")
        runner = run if point == 1 else forked
        hit = _purge(runner, checkout, "--yes", env={"MEMCTL_FAULT_AFTER": str(point)})
        if hit.returncode == 0:
            break
        assert hit.returncode == -9, (point, hit.stderr)
        kills += 1
        _each_file_whole(checkout, originals)
        rerun = _purge(runner, checkout, "--yes")
        assert rerun.returncode == 0, (point, rerun.stderr)
        assert {p.name: p.read_bytes() for p in _kept(checkout)} == expected, point
        for path in checkout.raw_dir.iterdir():
            assert path.read_bytes() == expected[path.name], (point, path)  # no temp file either
        assert leaks(checkout.base) == [], point
        if point % 5 == 1:
            assert _archived_sessions(runner, checkout) == sessions_without_purge, point
    else:
        pytest.fail("the purge never finished")
    assert kills >= 8, kills
    print(f"\nraw-log purge: killed at {kills} steps, 0 lines lost, 0 torn files, each rerun scrubbed everything")


# ---------------------------------------------------------------- a full disk


def test_a_full_disk_under_the_raw_logs_is_one_line_and_the_log_stays_whole(tmp_path, run):
    from test_disk_full import DISK_BYTES, fill

    checkout = make_checkout(tmp_path)
    checkout.raw_dir.rmdir()
    checkout.raw_dir.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES},mode=0755", "tmpfs",
                              str(checkout.raw_dir)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip() or mounted.returncode})")
    try:
        checkout.add_real_writer_logs(days=-60)
        log = checkout.raw_dir / SECRET_LOG
        with open(log, "ab") as handle:
            handle.write(SECRET_TURN)
        assert run("init", "--no-plugin", cwd=checkout.base).returncode == 0  # another filesystem: kept as copies
        original = log.read_bytes()
        filler = fill(checkout.raw_dir)

        full = _purge(run, checkout, "--yes")
        assert full.returncode == 3, full.stderr
        said = full.stderr.decode()
        assert "Traceback" not in said
        print(said)
        [line] = [x for x in said.splitlines() if "no space left" in x.lower()]
        assert str(log) in line and "pending" in line
        assert log.read_bytes() == original
        assert not [p for p in checkout.raw_dir.iterdir() if p.name.startswith(".")]

        filler.unlink()
        done = _purge(run, checkout, "--yes")
        assert done.returncode == 0, done.stderr
        assert log.read_bytes() == original.replace(SECRET.encode(), MARK)
        assert leaks(checkout.base) == [] and leaks(checkout.raw_dir) == []
        assert [p for p in _kept(checkout) if p.name == SECRET_LOG][0].read_bytes() == log.read_bytes()
    finally:
        subprocess.run(["umount", "-l", str(checkout.raw_dir)], capture_output=True)


def test_a_log_memctl_may_not_replace_is_pending_and_the_rest_scrubbed(tmp_path, run, monkeypatch):
    """A log memctl cannot rename over (another user's folder, an immutable file) is one
    pending line, the log whole; every other file is scrubbed, and no traceback."""
    from memctl.core.clock import now
    from memctl.core.config import load_settings
    from memctl.longterm.forget import purge

    checkout = _checkout(tmp_path, run, secret_in=(SECRET_LOG, "model_responses_652075.txt"))
    log = checkout.raw_dir / SECRET_LOG
    original = log.read_bytes()
    replace = os.replace

    def refused(source, target, *args, **kwargs):
        if str(target) == str(log):
            raise PermissionError(1, "Operation not permitted")
        return replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", refused)
    result = purge(load_settings(checkout.memory), [], [SECRET], "", now(), 5.0)
    assert result.pending == [f"{log}: operation not permitted; left as it was"]
    assert log.read_bytes() == original
    [kept] = [p for p in _kept(checkout) if p.name == SECRET_LOG]
    assert os.path.samestat(kept.stat(), log.stat())  # its kept link is the log itself: pending with it
    assert sorted(leaks(checkout.base)) == sorted([str(log), str(kept)])
    assert not [p for p in checkout.raw_dir.iterdir() if p.name.startswith(".")]


_APPENDER = r"""
import sys, time
path, count = sys.argv[1], int(sys.argv[2])
for i in range(count):
    time.sleep(0.001)  # an agent's turns come apart; this spreads them over the purges
    with open(path, "a", encoding="utf-8", errors="replace") as log:  # as GenericAgent writes: open, append, close
        log.write(f"=== Prompt === 2026-02-08 09:00:00\nturn {i:05d}" + (" orchid-7Hq2-vault" if i % 7 == 0 else "") + "\n\n")
print("done", flush=True)
"""


def test_purges_while_a_process_keeps_appending_lose_none_of_its_turns(tmp_path, run):
    """A real second process appends 3,000 turns (every 7th with the password) while purges run
    one after another: afterwards every turn is in the log exactly once, none with the password."""
    import re
    import sys

    checkout = _checkout(tmp_path, run)
    log = checkout.raw_dir / SECRET_LOG
    count = 3000
    appender = subprocess.Popen([sys.executable, "-c", _APPENDER, str(log), str(count)], stdout=subprocess.PIPE)
    purges = 0
    try:
        while appender.poll() is None:
            done = _purge(run, checkout, "--yes")
            assert done.returncode in (0, 3), done.stderr  # 3: the log kept changing under 5 swaps
            purges += 1
        assert appender.communicate(timeout=120)[0] == b"done\n"
    finally:
        appender.kill()
    assert _purge(run, checkout, "--yes").returncode == 0
    turns = re.findall(rb"turn (\d{5})", log.read_bytes())
    assert sorted(turns) == [b"%05d" % i for i in range(count)], f"{count - len(set(turns))} turns lost"
    assert leaks(checkout.base) == []
    [kept] = [p for p in _kept(checkout) if p.name == SECRET_LOG]
    assert os.path.samestat(kept.stat(), log.stat())
    print(f"\n{purges} purges beside a process appending {count} turns: 0 lost, 0 twice")


def test_a_fifo_put_in_a_raw_logs_place_does_not_hang_the_purge(tmp_path):
    """Listed as a file, then swapped for a FIFO by whoever can write GenericAgent's folder:
    opening it must not wait for a writer that never comes."""
    import sys

    fifo = tmp_path / "model_responses_1.txt"
    os.mkfifo(fifo)
    code = ("import sys; from pathlib import Path; from memctl.l4.purge_raw import scrub_in_place; "
            "print(scrub_in_place(Path(sys.argv[1]), [b'orchid-7Hq2-vault'], b'[PURGED]'))")
    done = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, timeout=60, env=clean_env())
    assert (done.returncode, done.stdout) == (0, b"False\n"), done.stderr


def test_a_team_purge_scrubs_each_machines_raw_logs_not_archived_yet(run, tmp_path, pg_server, pg_memory_name):
    """On a team memory (PostgreSQL) the purging machine scrubs its own raw logs, and another
    machine its own when it applies the purge's order, before its next command shows anything."""
    from test_pg_purge_orders import machine

    logs = {}
    for name in ("a", "b"):
        root = machine(run, tmp_path, name, pg_server, pg_memory_name, secret_in_files=False)
        log = root.parent / "temp" / "model_responses" / "model_responses_1.txt"
        log.write_bytes(SECRET_TURN)
        logs[name] = (root, log)
    purged = run("forget", "--purge", "--match", SECRET, "--yes", root=logs["a"][0])
    assert purged.returncode == 0, purged.stderr
    assert logs["a"][1].read_bytes() == SECRET_TURN.replace(SECRET.encode(), MARK)
    assert logs["b"][1].read_bytes() == SECRET_TURN  # B has run nothing yet
    shown = run("search", SECRET, root=logs["b"][0])
    assert shown.returncode in (0, 1) and SECRET.encode() not in shown.stdout + shown.stderr
    assert logs["b"][1].read_bytes() == SECRET_TURN.replace(SECRET.encode(), MARK)
