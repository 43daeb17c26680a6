"""GenericAgent as it really runs (issue 32): a process that imported its own archiver before
`memctl init`, logs that are not archived yet, a purge's dry run over adopted sessions, the
shim and the plugin after the venv that ran init is gone, and L1 after each archive run.
GenericAgent's own code is the oracle (tests/ga_checkout.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
import zipfile

from conftest import clean_env
from ga_checkout import archived_by_genericagent, make_checkout, run_scheduler_l4_path


def _manifest(l4) -> list[dict]:
    path = l4 / "manifest.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _members_holding(checkout, needle: bytes) -> set[str]:
    found = set()
    for zip_path in checkout.l4.glob("*.zip"):
        with zipfile.ZipFile(zip_path) as archive:
            found |= {f"{zip_path.name}:{n}" for n in archive.namelist() if needle in archive.read(n)}
    return found


# ---------------------------------------------------------------- forget --purge --dry-run (item 3)


def test_purge_dry_run_names_genericagents_members_and_changes_nothing(tmp_path, run):
    checkout = archived_by_genericagent(tmp_path, clean_env())
    init = run("init", "--no-plugin", cwd=checkout.base)
    assert init.returncode == 0 and b"if GenericAgent is running, restart it" in init.stderr  # none found to name
    needle = "华东区发布日志".encode()
    adopted = {f"{r['zip']}:{r['member']}" for r in _manifest(checkout.l4) if r.get("origin")}
    holding = _members_holding(checkout, needle)
    assert holding and holding <= adopted
    before = {p: p.read_bytes() for p in checkout.l4.iterdir() if p.is_file()}

    preview = run("forget", "--purge", "--match", "华东区发布日志", "--dry-run", cwd=checkout.base)
    assert preview.returncode == 0, preview.stderr
    said = preview.stdout.decode()
    for zip_member in holding:
        zip_name, member = zip_member.split(":")
        assert zip_name in said and member[:-len(".txt")] in said, said
    assert {p: p.read_bytes() for p in checkout.l4.iterdir() if p.is_file()} == before

    purged = run("forget", "--purge", "--match", "华东区发布日志", "--yes", cwd=checkout.base)
    assert purged.returncode == 0, purged.stderr
    assert _members_holding(checkout, needle) == set()


# ---------------------------------------------------------------- a GenericAgent running before init (item 1)

_RUNNING_GENERICAGENT = """
import builtins, sys
builtins._lock = None  # the scheduler binds a fixed port at import unless _lock exists
sys.path.insert(0, 'reflect')
import scheduler
scheduler.check()  # its first L4 run: imports GenericAgent's own compress_session
print('ready', flush=True)
sys.stdin.readline()  # memctl init runs meanwhile
scheduler._l4_t = 0  # twelve hours later
scheduler.check()
"""


def _start_running_genericagent(checkout):
    import select
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-c", _RUNNING_GENERICAGENT], cwd=checkout.base, env=clean_env(),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    said = b""
    while b"ready\n" not in said:  # its own prints come first ("No raw files found")
        if not select.select([process.stdout], [], [], 120)[0]:
            process.kill()
            raise AssertionError(f"GenericAgent's scheduler did not start: {said!r}")
        chunk = os.read(process.stdout.fileno(), 65536)
        if not chunk:
            process.kill()
            raise AssertionError(f"GenericAgent's scheduler failed: {said!r} {process.communicate(timeout=60)[1]!r}")
        said += chunk
    return process


def test_a_genericagent_running_before_init_loses_no_session(tmp_path, run):
    checkout = make_checkout(tmp_path)
    first = checkout.add_real_writer_logs(days=-60)  # 7 logs: its first run keeps the 10 newest, archives none
    genericagent = _start_running_genericagent(checkout)
    try:
        init = run("init", "--no-plugin", cwd=checkout.base)
        assert init.returncode == 0, init.stderr
        said = init.stderr.decode()
        assert f"GenericAgent is running in this checkout (pid {genericagent.pid})" in said and "restart it" in said
        assert "kept 7 raw logs" in said
        second = checkout.add_real_writer_logs(days=-30, prefix="1")  # it kept writing: 14 logs
        out, err = genericagent.communicate(b"\n", timeout=300)  # its own archiver, imported before init
    finally:
        genericagent.kill()
    assert genericagent.returncode == 0 and b"[L4 cron]" in out and b"'by': 'memctl'" not in out, err
    gone = set(first) - set(checkout.raw_hashes())
    assert len(gone) == 4  # GenericAgent's archiver deleted the four oldest, tiny and duplicate ones too

    archived = run("archive", "--json", cwd=checkout.base)
    assert archived.returncode == 0, archived.stderr
    assert json.loads(archived.stdout)["kept_raw"]["orphans"] == 4
    for name in gone:  # each one whole, byte for byte, though its raw log was deleted
        restored = run("show", "--raw", name, cwd=checkout.base)
        assert restored.returncode == 0, (name, restored.stderr)
        assert hashlib.sha256(restored.stdout).hexdigest() == first[name]
    kept = {p.name for p in (checkout.memory / ".memctl" / "kept-raw").rglob("model_responses_*")}
    assert kept == set(checkout.raw_hashes()) and len(kept) == 10  # the rest stay kept until archived
    assert set(second) <= kept


def _whole(run, checkout, originals: dict[str, str]) -> None:
    """Each session byte for byte: in its raw log, in a kept log, or rebuilt from its zip."""
    kept = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in (checkout.memory / ".memctl" / "kept-raw").rglob("model_responses_*")}
    present = checkout.raw_hashes()
    for name, sha in originals.items():
        if present.get(name) == sha or kept.get(name) == sha:
            continue
        restored = run("show", "--raw", name, cwd=checkout.base)
        assert restored.returncode == 0 and hashlib.sha256(restored.stdout).hexdigest() == sha, name


def test_kept_logs_survive_sigkill_at_every_step_of_the_archive_run(tmp_path, run):
    checkout = make_checkout(tmp_path)
    originals = checkout.add_real_writer_logs(days=-60)
    assert run("init", "--no-plugin", cwd=checkout.base).returncode == 0
    deleted = sorted(originals)[:4]
    for name in deleted:  # what GenericAgent's own archiver does behind memctl's back
        (checkout.raw_dir / name).unlink()
    killed = 0
    for point in range(1, 80):
        run_ = run("archive", "--json", cwd=checkout.base, env={"MEMCTL_FAULT_AFTER": str(point)})
        _whole(run, checkout, originals)
        if run_.returncode != -9:
            assert run_.returncode == 0, run_.stderr
            break
        killed += 1
    assert killed >= 4  # the run was really cut at its zip, manifest, history and delete steps
    assert run("archive", cwd=checkout.base).returncode == 0
    left = {p.name for p in (checkout.memory / ".memctl" / "kept-raw").rglob("model_responses_*")}
    assert left == set(originals) - set(deleted)  # the orphans were archived, then let go
    _whole(run, checkout, originals)
    assert run("verify", cwd=checkout.base).returncode == 0


# ---------------------------------------------------------------- the venv that ran init is gone (item 4)


def test_a_removed_venv_fails_loud_verify_warns_and_init_repairs(tmp_path, run):
    import subprocess
    import sys
    import sysconfig

    checkout = make_checkout(tmp_path)
    checkout.add_real_writer_logs(days=-60)
    checkout.add_real_writer_logs(days=-30, prefix="1")
    old = tmp_path / "old-venv" / "bin"
    old.mkdir(parents=True)
    (old / "python").symlink_to(os.path.realpath(sys.executable))  # a venv's python: sys.executable keeps this path
    (old / "memctl").write_text("#!/bin/sh\nexit 0\n")
    (old / "memctl").chmod(0o755)
    units = tmp_path / "config"
    repo = str(Path(__file__).resolve().parent.parent)
    env = clean_env(PYTHONPATH=f"{repo}:{sysconfig.get_paths()['purelib']}", XDG_CONFIG_HOME=str(units))
    for args in (["init"], ["schedule", "install", "--systemd", "--memctl", str(old / "memctl")]):
        done = subprocess.run([str(old / "python"), "-m", "memctl", *args], cwd=checkout.base, env=env,
                              capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr
    assert str(old / "python") in (checkout.l4 / "compress_session.py").read_text()
    shutil.rmtree(old.parent)  # the venv that ran init is gone
    before = checkout.raw_hashes()

    cron = run_scheduler_l4_path(checkout, clean_env())  # GenericAgent's scheduler: its report, its log
    assert cron.returncode == 0 and b"'errors': 1" in cron.stdout, cron.stderr
    assert b"is gone" in cron.stdout and b"run `memctl init`" in cron.stdout
    log = (checkout.base / "sche_tasks" / "scheduler.log").read_text(encoding="utf-8")
    assert "ERROR L4 archive failed: memctl shim" in log and str(old / "python") in log
    assert checkout.raw_hashes() == before

    verified = run("verify", "--json", cwd=checkout.base, env={"XDG_CONFIG_HOME": str(units)})
    assert verified.returncode == 0, verified.stdout
    stale = {Path(f["path"]).name: f for f in map(json.loads, verified.stdout.splitlines())
             if f.get("kind") == "interpreter"}
    assert set(stale) == {"compress_session.py", "memctl_recall.py", "memctl-archive.service", "memctl-dream.service"}
    assert all(f["severity"] == "warning" and "is gone" in f["message"] for f in stale.values())

    assert run("init", cwd=checkout.base).returncode == 0  # the memctl of this venv writes them anew
    again = run("verify", "--json", cwd=checkout.base, env={"XDG_CONFIG_HOME": str(units)})
    still = {Path(f["path"]).name for f in map(json.loads, again.stdout.splitlines()) if f.get("kind") == "interpreter"}
    assert still == {"memctl-archive.service", "memctl-dream.service"}  # `schedule install` repairs those
    cron = run_scheduler_l4_path(checkout, clean_env())
    assert cron.returncode == 0 and b"'by': 'memctl'" in cron.stdout and b"'errors': 0" in cron.stdout, cron.stderr


# ---------------------------------------------------------------- L1 after archiving (item 5, #29)


def _recent_names(insight_text: str) -> list[str]:
    import re

    lines = insight_text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("L4:"))
    recent = " | ".join(line.lstrip("| ") for line in lines[at + 1:] if line.startswith("|")).removeprefix("recent: ")
    return re.findall(r"(\d{4}_\d{4}-\d{4}_\d{4}(?:_\d+)?)\(", recent)


def test_each_archive_run_points_l1_at_what_the_new_sessions_were_about(tmp_path, run):
    from ga_checkout import UPSTREAM

    checkout = make_checkout(tmp_path)
    template = (UPSTREAM / "assets" / "global_mem_insight_template_en.txt").read_text(encoding="utf-8")
    head, rules = template.split("[RULES]", 1)
    mine = "note to self: the NAS is nas-07, ask before rebooting it"
    written = head.rstrip("\n") + "\n" + mine + "\n\n[RULES]" + rules
    insight = checkout.memory / "global_mem_insight.txt"
    insight.write_text(written, encoding="utf-8")
    hand_written = [line for line in written.splitlines() if line and not line.startswith(("L0", "L2", "L3", "L4", "|"))]
    checkout.add_real_writer_logs(days=-60)
    assert run("init", "--no-plugin", cwd=checkout.base).returncode == 0

    assert run("archive", "--keep-newest", "0", cwd=checkout.base).returncode == 0
    newest = [r["name"] for r in sorted(_manifest(checkout.l4), key=lambda r: (r["end"], r["start"]), reverse=True)]
    text = insight.read_text(encoding="utf-8")
    shown = _recent_names(text)  # GenericAgent's own L1 is over 1 KB already: then only the newest
    assert shown and shown == newest[:len(shown)], text
    assert [line for line in text.splitlines() if line in hand_written] == hand_written  # every one kept, in order
    ours = {number for number, line in enumerate(text.splitlines(), start=1) if line.startswith(("L4", "| recent"))}
    findings = run("insight", "check", "--json", cwd=checkout.base).stdout.splitlines()
    assert findings and not {json.loads(f)["line"] for f in findings} & ours  # the template's own ghosts only
    assert run("insight", "rebuild", cwd=checkout.base).returncode == 0 and insight.read_text(encoding="utf-8") == text

    checkout.add_real_writer_logs(days=-30, prefix="1")  # 14 new logs: the shim's run archives the 4 oldest
    checkout.add_real_writer_logs(days=-15, prefix="2")
    cron = run_scheduler_l4_path(checkout, clean_env())
    assert cron.returncode == 0 and b"'by': 'memctl'" in cron.stdout and b"'errors': 0" in cron.stdout, cron.stderr
    newest = [r["name"] for r in sorted(_manifest(checkout.l4), key=lambda r: (r["end"], r["start"]), reverse=True)]
    after = insight.read_text(encoding="utf-8")
    assert _recent_names(after) == newest[:len(shown)] and _recent_names(after) != shown, after
    assert [line for line in after.splitlines() if line in hand_written] == hand_written


# ---------------------------------------------------------------- logs not archived yet are memory (item 2)


def _hits(run, checkout, query: str) -> list[dict]:
    found = run("search", query, "-k", "20", "--json", cwd=checkout.base)
    assert found.returncode in (0, 1), found.stderr
    return [json.loads(line) for line in found.stdout.splitlines()]


def test_a_new_checkout_finds_what_its_unarchived_logs_hold(tmp_path, run):
    checkout = make_checkout(tmp_path)
    logs = checkout.add_real_writer_logs(days=-90)  # months old, but among the 10 newest: never archived
    (tmp_path / "elsewhere.txt").write_text("=== Prompt === 2026-01-01 10:00:00\nzebrafinch-outside\n\n")
    (checkout.raw_dir / "model_responses_999999.txt").symlink_to(tmp_path / "elsewhere.txt")  # never followed
    assert run("init", "--no-plugin", cwd=checkout.base).returncode == 0
    assert json.loads(run("archive", "--json", cwd=checkout.base).stdout)["new_sessions"] == 0

    hits = _hits(run, checkout, "华东区发布日志")
    from_raw = [h for h in hits if h["ref"].startswith("L4:model_responses_")]
    assert from_raw and from_raw[0]["layer"] == "L4" and from_raw[0]["date"].startswith("2026-01")
    name = from_raw[0]["ref"].removeprefix("L4:")
    shown = run("show", from_raw[0]["ref"], cwd=checkout.base)
    assert shown.returncode == 0 and "华东区发布日志".encode() in shown.stdout
    raw = run("show", "--raw", name, cwd=checkout.base)
    assert hashlib.sha256(raw.stdout).hexdigest() == logs[f"{name}.txt"]
    composed = run("compose", "华东区发布日志里 api-050 是哪个版本", cwd=checkout.base)
    assert composed.returncode == 0 and name.encode() in composed.stdout
    assert _hits(run, checkout, "zebrafinch-outside") == []
    assert {k: v for k, v in checkout.raw_hashes().items() if k in logs} == logs  # only read

    (checkout.raw_dir / f"{name}.txt").unlink()  # GenericAgent's own archiver, before a restart
    assert [h for h in _hits(run, checkout, "华东区发布日志") if h["ref"] == f"L4:{name}"]  # the kept log

    assert run("archive", "--keep-newest", "0", cwd=checkout.base).returncode == 0
    after = _hits(run, checkout, "华东区发布日志")
    assert after and not [h for h in after if h["ref"].startswith("L4:model_responses_")]  # archived: no twin
    archived = {r["name"] for r in _manifest(checkout.l4)}
    assert any(h["ref"].removeprefix("L4:").split("#")[0] in archived for h in after)


def test_where_no_hard_link_is_possible_the_logs_are_copied_and_init_says_so(tmp_path, monkeypatch):
    import errno

    from memctl.core.config import init_root, load_settings
    from memctl.l4.kept import keep_unarchived, orphan_candidates
    from memctl.ops.genericagent import keeping_sentences

    checkout = make_checkout(tmp_path)
    logs = checkout.add_real_writer_logs(days=-60)
    init_root(checkout.memory)
    settings = load_settings(checkout.memory)

    def other_filesystem(*args, **kwargs):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", other_filesystem)
    report = keep_unarchived(settings.layout, checkout.raw_dir)
    assert sorted(report.copied) == sorted(logs) and not report.linked
    assert any("copied 7 raw logs" in s and "another filesystem" in s for s in keeping_sentences(report))
    name = sorted(logs)[0]
    with open(checkout.raw_dir / name, "ab") as log:  # GenericAgent appends: the copy follows
        log.write(b"=== Prompt === 2026-02-20 10:00:00\nmore\n\n")
    assert keep_unarchived(settings.layout, checkout.raw_dir).copied == [name]
    grown = (checkout.raw_dir / name).read_bytes()
    (checkout.raw_dir / name).unlink()
    orphans = orphan_candidates(settings.layout, checkout.raw_dir)
    assert [c.path.name for c in orphans] == [name] and orphans[0].path.read_bytes() == grown
