"""Timers: the shipped contrib/ files, `schedule install`, systemd-analyze, and the cron lines."""

from __future__ import annotations

import os
import re
import shutil
import time
import subprocess
from pathlib import Path

import pytest

from memctl.ops import schedule
from memctl.core.config import Layout

REPO = Path(__file__).resolve().parent.parent
CONTRIB = REPO / "contrib"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed on this machine (apt-get install systemd)"
)


def test_contrib_files_match_what_schedule_renders():
    for rel, text in schedule.contrib_files().items():
        path = CONTRIB / rel
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale: regenerate it from memctl.ops.schedule"


def test_service_settings():
    for name in ("memctl-archive.service", "memctl-dream.service"):
        text = (CONTRIB / "systemd" / name).read_text()
        for setting in (
            "Type=oneshot",
            "TimeoutStartSec=",
            "SuccessExitStatus=75",
            "UMask=0077",
            "Nice=19",
            "IOSchedulingClass=idle",
            "NoNewPrivileges=yes",
            "MEMCTL_HOME=",
            "LANG=C.UTF-8",
        ):
            assert setting in text, (name, setting)
        assert "RemainAfterExit" not in text  # a timer would trigger it only once
    for name, calendar in (("memctl-archive.timer", "*-*-* 00/12:00:00"), ("memctl-dream.timer", "*-*-* 04:00:00")):
        text = (CONTRIB / "systemd" / name).read_text()
        assert f"OnCalendar={calendar}\n" in text
        assert "Persistent=true" in text
        delay = re.search(r"RandomizedDelaySec=(\d+)min", text)
        assert delay and int(delay.group(1)) <= 15
        assert "WantedBy=timers.target" in text


def _verify(unit_dir: Path, tmp_path: Path, home: Path) -> subprocess.CompletedProcess:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "HOME": str(home), "SYSTEMD_LOG_COLOR": "0"}
    units = sorted(str(p) for p in unit_dir.iterdir())
    return subprocess.run(
        [SYSTEMD_ANALYZE, "--user", "verify", "--man=no", *units], capture_output=True, text=True, env=env, timeout=60
    )


@needs_systemd_analyze
def test_contrib_units_pass_systemd_analyze_verify(tmp_path, memctl_bin):
    # %h/.local/bin/memctl must exist for verify to accept ExecStart
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "memctl").symlink_to(memctl_bin)
    result = _verify(CONTRIB / "systemd", tmp_path, home)
    assert result.returncode == 0, result.stderr


@needs_systemd_analyze
def test_a_broken_unit_fails_verify(tmp_path, memctl_bin):
    # proves the verify test above can fail
    units = tmp_path / "units"
    units.mkdir()
    for unit in schedule.systemd_units_for([memctl_bin], tmp_path / "memory"):
        (units / unit.name).write_text(unit.text.replace("04:00:00", "25:00:00"))
    assert _verify(units, tmp_path, tmp_path).returncode != 0


@needs_systemd_analyze
@pytest.mark.parametrize(
    "calendar,base,expected",
    [
        ("*-*-* 00/12:00:00", "2026-03-10 07:30:00", ["2026-03-10 12:00:00", "2026-03-11 00:00:00", "2026-03-11 12:00:00"]),
        ("*-*-* 04:00:00", "2026-03-10 07:30:00", ["2026-03-11 04:00:00", "2026-03-12 04:00:00", "2026-03-13 04:00:00"]),
        ("*-*-* 04:00:00", "2026-12-31 03:59:00", ["2026-12-31 04:00:00", "2027-01-01 04:00:00", "2027-01-02 04:00:00"]),
    ],
)
def test_calendars_give_the_expected_next_runs(calendar, base, expected):
    assert any(job.on_calendar == calendar for job in schedule.JOBS)
    env = {**os.environ, "TZ": "UTC", "SYSTEMD_LOG_COLOR": "0"}
    result = subprocess.run(
        [SYSTEMD_ANALYZE, "calendar", "--iterations=3", f"--base-time={base} UTC", calendar],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    found = re.findall(r"(?:Next elapse|Iter\. #\d): \w+ (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", result.stdout)
    assert found == expected, result.stdout


def test_schedule_install_systemd_writes_units_with_this_machines_paths(run, root, tmp_path, memctl_bin):
    assert run("init", root=root).returncode == 0
    unit_dir = tmp_path / "config" / "systemd" / "user"
    dry = run("schedule", "install", "--systemd", "--dry-run", "--unit-dir", unit_dir, root=root)
    assert dry.returncode == 0, dry.stderr
    assert b"[Timer]" in dry.stdout and b"would create" in dry.stdout
    assert not unit_dir.exists()

    done = run("schedule", "install", "--systemd", "--unit-dir", unit_dir, root=root)
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in unit_dir.iterdir())
    assert names == ["memctl-archive.service", "memctl-archive.timer", "memctl-dream.service", "memctl-dream.timer"]
    service = (unit_dir / "memctl-archive.service").read_text()
    assert f"ExecStart={memctl_bin} archive --missing-ok\n" in service
    assert f'Environment="MEMCTL_HOME={root}"' in service
    assert b"systemctl --user enable --now memctl-archive.timer memctl-dream.timer" in done.stderr

    again = run("schedule", "install", "--systemd", "--unit-dir", unit_dir, root=root)
    assert again.stdout.decode().count("unchanged") == 4


@needs_systemd_analyze
def test_installed_units_pass_verify(run, root, tmp_path):
    run("init", root=root)
    unit_dir = tmp_path / "units"
    assert run("schedule", "install", "--systemd", "--unit-dir", unit_dir, root=root).returncode == 0
    result = _verify(unit_dir, tmp_path, tmp_path)
    assert result.returncode == 0, result.stderr


def test_install_refuses_to_overwrite_a_foreign_unit(run, root, tmp_path):
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    (unit_dir / "memctl-archive.timer").write_text("[Timer]\nOnCalendar=hourly\n")
    refused = run("schedule", "install", "--systemd", "--unit-dir", unit_dir, root=root)
    assert refused.returncode == 2
    assert b"--force" in refused.stderr
    assert (unit_dir / "memctl-archive.timer").read_text() == "[Timer]\nOnCalendar=hourly\n"
    assert run("schedule", "install", "--systemd", "--force", "--unit-dir", unit_dir, root=root).returncode == 0


def test_paths_with_spaces_and_percent_are_escaped(tmp_path):
    odd_root = tmp_path / "my memory 100%"
    (service, *_) = schedule.systemd_units_for(["/opt/my tools/memctl"], odd_root)
    assert 'ExecStart="/opt/my tools/memctl" archive' in service.text
    assert "100%%" in service.text
    cron = schedule.cron_text_for(["/opt/my tools/memctl"], odd_root)
    assert "100\\%" in cron and "'/opt/my tools/memctl'" in cron


def _cron_jobs(text: str) -> list[tuple[list[str], str]]:
    jobs = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split(None, 5)
        assert len(fields) == 6, line
        jobs.append((fields[:5], fields[5]))
    return jobs


def _field_ok(field: str, low: int, high: int) -> bool:
    for part in field.split(","):
        base, _, step = part.partition("/")
        if step and not step.isdigit():
            return False
        if base == "*":
            continue
        for bound in base.split("-"):
            if not bound.isdigit() or not low <= int(bound) <= high:
                return False
    return True


def test_cron_lines_parse_and_use_flock(run, root):
    printed = run("schedule", "install", "--cron", root=root)
    assert printed.returncode == 0, printed.stderr
    for text in (printed.stdout.decode(), (CONTRIB / "cron" / "memctl").read_text()):
        jobs = _cron_jobs(text)
        assert [f for f, _ in jobs] == [["0", "*/12", "*", "*", "*"], ["0", "4", "*", "*", "*"]]
        for fields, command in jobs:
            for field, (low, high) in zip(fields, [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]):
                assert _field_ok(field, low, high), field
            assert "flock " in command and "/.memctl/cron.lock" in command
            assert "MEMCTL_HOME=" in command and "LANG=C.UTF-8" in command
            assert re.search(r"(?<!\\)%", command) is None, "an unescaped % is a newline to cron"
    assert f"MEMCTL_HOME={root}" in printed.stdout.decode()


FAKE_MEMCTL = """#!/bin/sh
# stands in for memctl: records its environment, takes memctl's real writer lock, exits as told
printf '%s|%s|%s\\n' "$1" "$MEMCTL_HOME" "$LANG" >> "$MEMCTL_HOME/calls.log"
"{python}" -c 'import sys; from memctl.core.fsutil import WriterLock; WriterLock(sys.argv[1]).acquire()' "$MEMCTL_HOME/.memctl/lock" || exit 9
echo "report on stdout"
echo "progress on stderr" >&2
exit "$(cat "$MEMCTL_HOME/exit_code")"
"""


def _run_cron_command(command: str, env_home: Path) -> subprocess.CompletedProcess:
    shell_command = command.replace("\\%", "%")  # what cron hands to /bin/sh
    env = {"PATH": "/usr/bin:/bin", "HOME": str(env_home), "SHELL": "/bin/sh"}  # cron's minimal environment
    return subprocess.run(["/bin/sh", "-c", shell_command], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.skipif(shutil.which("flock") is None, reason="flock(1) (util-linux) is not installed")
def test_cron_line_runs_silently_on_success_and_loudly_on_failure(run, root, tmp_path):
    import sys

    assert run("init", root=root).returncode == 0
    fake = tmp_path / "bin" / "memctl"
    fake.parent.mkdir()
    fake.write_text(FAKE_MEMCTL.replace("{python}", sys.executable))
    fake.chmod(0o755)
    (archive_cmd, dream_cmd) = (c for _, c in _cron_jobs(schedule.cron_text_for([str(fake)], root)))

    (root / "exit_code").write_text("0")
    ok = _run_cron_command(archive_cmd, tmp_path)
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "", "")
    # the wrapper's flock and memctl's own lock are different files, so memctl got its lock
    assert (root / "calls.log").read_text() == f"archive|{root}|C.UTF-8\n"

    (root / "exit_code").write_text("75")
    assert _run_cron_command(dream_cmd, tmp_path).stdout == ""

    (root / "exit_code").write_text("2")
    failed = _run_cron_command(dream_cmd, tmp_path)
    assert "memctl dream failed (exit 2)" in failed.stdout
    assert "progress on stderr" in failed.stdout

    # a second archive while the first still holds the cron lock is skipped quietly
    (root / "exit_code").write_text("0")
    cron_lock = root / ".memctl" / "cron.lock"
    holder = subprocess.Popen(["flock", str(cron_lock), "sleep", "30"])
    try:
        for _ in range(100):
            probe = subprocess.run(["flock", "-n", str(cron_lock), "true"])
            if probe.returncode != 0:
                break
            time.sleep(0.05)
        skipped = _run_cron_command(archive_cmd, tmp_path)
        assert (skipped.stdout, skipped.stderr) == ("", "")
        assert (root / "calls.log").read_text().count("archive|") == 1
    finally:
        holder.kill()
        holder.wait()


def test_cron_lock_is_not_memctls_own_lock(tmp_path):
    # flock(1) on .memctl/lock would make memctl find its own lock busy and exit 75 every time
    assert Layout(tmp_path).lock != tmp_path / schedule.CRON_LOCK


def _memory_with_a_closed_log(run, tmp_path) -> Path:
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    (root / "memctl.toml").write_text('[archive]\nmin_age = "0"\nkeep_newest = 0\n', encoding="utf-8")
    raw = tmp_path / "temp" / "model_responses"  # GenericAgent's layout: beside memory/
    raw.mkdir(parents=True)
    sample = Path(__file__).resolve().parent.parent / "memctl" / "samples" / "model_responses_571204.txt"
    shutil.copy(sample, raw / sample.name)
    os.utime(raw / sample.name, (1_700_000_000, 1_700_000_000))
    return root


@pytest.mark.skipif(shutil.which("flock") is None, reason="flock(1) (util-linux) is not installed")
def test_cron_lines_run_the_real_jobs_silently(run, tmp_path, memctl_bin):
    root = _memory_with_a_closed_log(run, tmp_path)
    jobs = _cron_jobs(schedule.cron_text_for([memctl_bin], root))
    for _, command in jobs:
        result = _run_cron_command(command, tmp_path)
        assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), command
    assert not list((tmp_path / "temp" / "model_responses").iterdir())  # archived, then removed
    assert (root / "L4_raw_sessions" / "all_histories.txt").exists()


@pytest.mark.skipif(shutil.which("flock") is None, reason="flock(1) (util-linux) is not installed")
def test_cron_line_reports_a_real_failure(run, tmp_path, memctl_bin):
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    (tmp_path / "temp").mkdir()
    (tmp_path / "temp" / "model_responses").write_text("a file where the raw-log folder belongs")
    (archive_cmd, _) = (c for _, c in _cron_jobs(schedule.cron_text_for([memctl_bin], root)))
    result = _run_cron_command(archive_cmd, tmp_path)
    assert "memctl archive failed (exit 2)" in result.stdout
    assert "raw-log folder" in result.stdout


def _unit_command(text: str) -> tuple[list[str], dict[str, str]]:
    """ExecStart and Environment of a rendered service (plain paths, no specifiers)."""
    import shlex

    env: dict[str, str] = {}
    argv: list[str] = []
    for line in text.splitlines():
        if line.startswith("Environment="):
            for assignment in shlex.split(line[len("Environment="):]):
                key, _, value = assignment.partition("=")
                env[key] = value.replace("%%", "%")
        elif line.startswith("ExecStart="):
            argv = [w.replace("%%", "%") for w in shlex.split(line[len("ExecStart="):])]
    return argv, env


def test_service_commands_run_the_real_jobs(run, tmp_path, memctl_bin):
    root = _memory_with_a_closed_log(run, tmp_path)
    services = [u for u in schedule.systemd_units_for([memctl_bin], root) if u.name.endswith(".service")]
    for unit in services:
        argv, env = _unit_command(unit.text)
        assert argv[0] == memctl_bin and env["MEMCTL_HOME"] == str(root)
        result = subprocess.run(argv, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env},
                                capture_output=True, timeout=120)
        assert result.returncode in (0, 75), (unit.name, result.stderr)
    assert not list((tmp_path / "temp" / "model_responses").iterdir())


@pytest.mark.skipif(shutil.which("flock") is None, reason="flock(1) (util-linux) is not installed")
def test_the_timers_of_a_memory_without_agent_logs_succeed(run, tmp_path, memctl_bin):
    """The Quick start's memory has no raw-log folder: its archive job finds nothing to archive
    and exits 0 (cron mails nothing, systemd records no failure) instead of failing every 12 h."""
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    installed = run("schedule", "install", "--systemd", "--unit-dir", tmp_path / "units", root=root)
    assert installed.returncode == 0, installed.stderr
    assert b"no raw-log folder at" in installed.stderr
    for service in sorted((tmp_path / "units").glob("*.service")):
        argv, env = _unit_command(service.read_text())
        result = subprocess.run(argv, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env},
                                capture_output=True, timeout=120)
        assert result.returncode == 0, (service.name, result.stderr)
    for _, command in _cron_jobs(schedule.cron_text_for([memctl_bin], root)):
        result = _run_cron_command(command, tmp_path)
        assert (result.returncode, result.stdout) == (0, ""), command
    by_hand = run("archive", root=root)  # typed by a person, the missing folder is still an error
    assert by_hand.returncode == 2 and b"raw-log folder" in by_hand.stderr
    assert not (tmp_path / "temp").exists()
