"""Timers for the maintenance cycles: systemd user units, crontab lines, macOS LaunchAgents
and Windows Task Scheduler tasks (design.md §10). Every format is rendered from the same
`JOBS` (the command and its times), so the four cannot name different runs.

Pure rendering plus one small installer. The same functions produce the generic files in
`contrib/` (with `%h` / `$HOME` paths) and the files `memctl schedule install` writes with
this machine's paths, so the two cannot drift apart (a test compares them).

Why the cron lock is not `.memctl/lock`: flock(1) holds its lock on its own open file
description and memctl's WriterLock opens the file again, so the kernel would refuse memctl
its own lock and every run would exit 75. Cron jobs therefore serialise on
`.memctl/cron.lock` (the dream waits for an overrunning archive), and memctl's internal lock
still keeps them apart from every other writer.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from memctl.core.errors import UsageError
from memctl.core.fsutil import atomic_write_text, ensure_private_dir

MANAGED_MARK = "memctl schedule"
CRON_LOCK = ".memctl/cron.lock"


@dataclass(frozen=True)
class Job:
    name: str  # archive, dream
    args: tuple[str, ...]  # memctl arguments
    description: str
    on_calendar: str  # systemd calendar expression
    cron_spec: str  # the 5 cron time fields
    timeout: str  # TimeoutStartSec
    cron_flock: str  # flock(1) options: -n skips a run that finds the previous one busy
    address_families: str  # archive needs no network; a dream may call a configured model
    times: tuple[tuple[int, int], ...]  # (hour, minute) each day: launchd and Task Scheduler


JOBS: tuple[Job, ...] = (
    Job(
        name="archive",
        # a memory without agent logs (the Quick start's) has nothing to archive: not a failure
        args=("archive", "--missing-ok"),
        description="archive closed agent session logs into L4",
        on_calendar="*-*-* 00/12:00:00",
        cron_spec="0 */12 * * *",
        timeout="2h",
        cron_flock="-n -E 75",
        address_families="AF_UNIX",
        times=((0, 0), (12, 0)),
    ),
    Job(
        name="dream",
        args=("dream",),
        description="nightly dream pass over long-term memory (consolidate, archive, forget, merge)",
        on_calendar="*-*-* 04:00:00",
        cron_spec="0 4 * * *",
        timeout="1h",
        # wait up to 15 min for an archive run that overran, rather than skip a night
        cron_flock="-w 900 -E 75",
        address_families="AF_UNIX AF_INET AF_INET6",
        times=((4, 0),),
    ),
)


@dataclass(frozen=True)
class UnitFile:
    name: str
    text: str


# ---------------------------------------------------------------- systemd


def systemd_escape_word(word: str) -> str:
    """One ExecStart word: specifiers (%) and variables ($) literal, quoted when needed."""
    if "\n" in word:
        raise UsageError(f"path {word!r} holds a newline; systemd units cannot name it")
    escaped = word.replace("%", "%%").replace("$", "$$")
    if any(c in escaped for c in " \t\"'\\;"):
        escaped = '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return escaped


def systemd_escape_env(value: str) -> str:
    """The value part of Environment="NAME=value" (specifiers literal)."""
    if "\n" in value:
        raise UsageError(f"path {value!r} holds a newline; systemd units cannot name it")
    return value.replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"')


# hardening every unit shares (RestrictAddressFamilies= is each unit's own)
_HARDENING = """\
NoNewPrivileges=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
RestrictNamespaces=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallErrorNumber=EPERM
"""


def render_service(job: Job, exec_words: Sequence[str], memctl_home: str) -> str:
    """`exec_words` and `memctl_home` are already in unit-file syntax (escaped or specifiers)."""
    exec_start = " ".join([*exec_words, *job.args])
    return f"""\
# {MANAGED_MARK}: {job.name}. Written by `memctl schedule install --systemd`; a reinstall replaces it.
[Unit]
Description=memctl {job.description}

[Service]
Type=oneshot
Environment="MEMCTL_HOME={memctl_home}" LANG=C.UTF-8 PYTHONUTF8=1
ExecStart={exec_start}
# oneshot units have no start timeout by default; a hung run would block every later one
TimeoutStartSec={job.timeout}
# 75 = another memctl holds the lock: this run was skipped, not failed
SuccessExitStatus=75
SyslogIdentifier=memctl-{job.name}
# background priority
Nice=19
CPUSchedulingPolicy=batch
IOSchedulingClass=idle
UMask=0077
# hardening that works in a user manager (namespace options such as ProtectSystem= need
# PrivateUsers= there and are left to system units)
{_HARDENING}RestrictAddressFamilies={job.address_families}
"""


def render_timer(job: Job) -> str:
    return f"""\
# {MANAGED_MARK}: {job.name}. Enable the timer, never the service.
[Unit]
Description=memctl {job.name} on schedule ({job.on_calendar})

[Timer]
OnCalendar={job.on_calendar}
# a run missed while the machine was off fires once at the next boot
Persistent=true
# small on purpose: a large delay with Persistent= postpones catch-up runs after every boot
RandomizedDelaySec=10min

[Install]
WantedBy=timers.target
"""


def systemd_units(exec_words: Sequence[str], memctl_home: str) -> list[UnitFile]:
    units = []
    for job in JOBS:
        units.append(UnitFile(f"memctl-{job.name}.service", render_service(job, exec_words, memctl_home)))
        units.append(UnitFile(f"memctl-{job.name}.timer", render_timer(job)))
    return units


def systemd_units_for(memctl_cmd: Sequence[str], root: Path) -> list[UnitFile]:
    """Units with this machine's absolute paths."""
    words = [systemd_escape_word(str(w)) for w in memctl_cmd]
    return systemd_units(words, systemd_escape_env(str(root)))


def contrib_systemd_units() -> list[UnitFile]:
    """The generic units in contrib/: memctl in ~/.local/bin, the memory in ~/.local/share."""
    return systemd_units(["%h/.local/bin/memctl"], "%h/.local/share/memctl")


def default_unit_dir(env: dict[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    config = env.get("XDG_CONFIG_HOME", "").strip()
    base = Path(config) if config and os.path.isabs(config) else Path(env.get("HOME", str(Path.home()))) / ".config"
    return base / "systemd" / "user"


def enable_commands() -> list[str]:
    timers = " ".join(f"memctl-{job.name}.timer" for job in JOBS)
    return [
        "systemctl --user daemon-reload",
        f"systemctl --user enable --now {timers}",
        "loginctl enable-linger \"$USER\"   # optional: run the timers while you are logged out",
        "systemctl --user list-timers 'memctl-*'",
    ]


@dataclass(frozen=True)
class InstallResult:
    path: Path
    action: str  # "create", "replace", "unchanged"


def install_units(units: Sequence[UnitFile], unit_dir: Path, dry_run: bool = False, force: bool = False) -> list[InstallResult]:
    """Write the units into `unit_dir`; a file memctl did not write is replaced only with force."""
    results = []
    for unit in units:
        path = Path(unit_dir) / unit.name
        action = _install_action(path, unit.text, force)
        results.append(InstallResult(path, action))
    if dry_run:
        return results
    if any(r.action != "unchanged" for r in results):
        ensure_private_dir(Path(unit_dir))
    for unit, result in zip(units, results):
        if result.action != "unchanged":
            atomic_write_text(result.path, unit.text, mode=0o644)
    return results


def _install_action(path: Path, text: str, force: bool) -> str:
    if not path.exists():
        return "create"
    current = path.read_text(encoding="utf-8", errors="replace")
    if current == text:
        return "unchanged"
    if MANAGED_MARK not in current and not force:
        raise UsageError(f"{path} exists and was not written by memctl; move it away or pass --force")
    return "replace"


# ---------------------------------------------------------------- cron


def _cron_escape(text: str) -> str:
    """cron turns an unescaped % into a newline."""
    if "\n" in text:
        raise UsageError(f"{text!r} holds a newline; a crontab line cannot name it")
    return text.replace("%", "\\%")


def cron_line(job: Job, memctl_sh: str, home_sh: str) -> str:
    """One crontab line; `memctl_sh` and `home_sh` are shell words (quoted or using $HOME).

    Everything is set inside the line, so nothing leaks into the user's other cron jobs.
    Output is kept and printed only when the job failed (exit other than 0 and 75), so cron
    mails nothing on success and everything on failure.
    """
    args = " ".join(shlex.quote(a) for a in job.args)
    command = (
        f"umask 077; MEMCTL_HOME={home_sh} LANG=C.UTF-8 LC_ALL=C.UTF-8 PYTHONUTF8=1; "
        "export MEMCTL_HOME LANG LC_ALL PYTHONUTF8; "
        f'out=$(flock {job.cron_flock} "$MEMCTL_HOME/{CRON_LOCK}" {memctl_sh} {args} 2>&1); rc=$?; '
        f'[ $rc -eq 0 ] || [ $rc -eq 75 ] || printf \'memctl {job.name} failed (exit %s)\\n%s\\n\' "$rc" "$out"'
    )
    return f"{job.cron_spec} {_cron_escape(command)}"


def cron_text(memctl_sh: str, home_sh: str) -> str:
    lines = [f"# {MANAGED_MARK}: archive every 12 h, dream at 04:00; silent unless a run fails"]
    lines += [cron_line(job, memctl_sh, home_sh) for job in JOBS]
    return "\n".join(lines) + "\n"


def cron_text_for(memctl_cmd: Sequence[str], root: Path) -> str:
    """Crontab lines with this machine's absolute paths."""
    return cron_text(" ".join(shlex.quote(str(w)) for w in memctl_cmd), shlex.quote(str(root)))


def contrib_cron_text() -> str:
    return cron_text('"$HOME/.local/bin/memctl"', '"$HOME/.local/share/memctl"')


def cron_install_hint(root: Path) -> list[str]:
    return [
        "add the lines above to your crontab (crontab -e), or append them:",
        f"  (crontab -l 2>/dev/null; memctl --root {shlex.quote(str(root))} schedule install --cron) | crontab -",
        "cron does not catch up on runs missed while the machine was off; systemd timers do (--systemd)",
    ]


# ---------------------------------------------------------------- launchd (macOS)

LAUNCHD_PREFIX = "io.memctl"


def launchd_plist(job: Job, memctl_cmd: Sequence[str], root: str, log_dir: str) -> str:
    """A LaunchAgent: StartCalendarInterval fires a run missed while asleep at wake-up."""
    import plistlib

    spec = {
        "Label": f"{LAUNCHD_PREFIX}.{job.name}",
        "ProgramArguments": [*map(str, memctl_cmd), *job.args],
        "EnvironmentVariables": {"MEMCTL_HOME": root, "LANG": "en_US.UTF-8", "PYTHONUTF8": "1"},
        "StartCalendarInterval": [{"Hour": hour, "Minute": minute} for hour, minute in job.times],
        "StandardOutPath": f"{log_dir}/memctl-{job.name}.log",
        "StandardErrorPath": f"{log_dir}/memctl-{job.name}.log",
        "ProcessType": "Background",
        "LowPriorityIO": True,
        "Nice": 19,
        "Umask": 0o077,
        "RunAtLoad": False,
    }
    text = plistlib.dumps(spec, sort_keys=False).decode("utf-8")
    mark = f"<!-- {MANAGED_MARK}: {job.name}. written by memctl schedule install; a reinstall replaces it -->\n"
    head, _, body = text.partition("<plist")
    return head + mark + "<plist" + body


def launchd_units_for(memctl_cmd: Sequence[str], root: Path, home: Path | None = None) -> list[UnitFile]:
    logs = str((home or Path.home()) / "Library" / "Logs")
    return [UnitFile(f"{LAUNCHD_PREFIX}.{job.name}.plist", launchd_plist(job, memctl_cmd, str(root), logs))
            for job in JOBS]


def default_launchd_dir(home: Path | None = None) -> Path:
    return (home or Path.home()) / "Library" / "LaunchAgents"


def launchd_enable_commands(unit_dir: Path) -> list[str]:
    lines = [f'launchctl bootstrap gui/"$(id -u)" {shlex.quote(str(unit_dir / f"{LAUNCHD_PREFIX}.{job.name}.plist"))}'
             for job in JOBS]
    return lines + [f"launchctl print gui/\"$(id -u)\"/{LAUNCHD_PREFIX}.{JOBS[0].name}   # state and last exit"]


# ---------------------------------------------------------------- Windows Task Scheduler

TASK_NS = "http://schemas.microsoft.com/windows/2004/02/mit/task"
TASK_FOLDER = "memctl"
_ISO_TIMEOUT = {"h": "H", "m": "M"}


def _iso_duration(timeout: str) -> str:
    """systemd's '2h' -> Task Scheduler's 'PT2H'."""
    return f"PT{timeout[:-1]}{_ISO_TIMEOUT[timeout[-1]]}"


def task_xml(job: Job, memctl_cmd: Sequence[str], root: str) -> str:
    """A Task Scheduler 1.2 task: one daily CalendarTrigger per time, StartWhenAvailable so a
    run missed while the machine was off happens at the next chance (like Persistent=)."""
    triggers = "".join(
        f"""
    <CalendarTrigger>
      <StartBoundary>2026-01-01T{hour:02d}:{minute:02d}:00</StartBoundary>
      <RandomDelay>PT10M</RandomDelay>
      <ScheduleByDay><DaysInterval>1</DaysInterval></ScheduleByDay>
    </CalendarTrigger>""" for hour, minute in job.times)
    settings = f"""
    <StartWhenAvailable>true</StartWhenAvailable>
    <ExecutionTimeLimit>{_iso_duration(job.timeout)}</ExecutionTimeLimit>
    <Priority>7</Priority>"""
    mark = f"{job.name}. written by memctl schedule install; a reinstall replaces it"
    return _task_document(job.name, mark, f"memctl {job.description}", triggers, settings,
                          memctl_cmd, ("--root", root), job.args)


def _task_document(name: str, mark: str, description: str, triggers: str, settings: str,
                   memctl_cmd: Sequence[str], root_args: Sequence[str], args: Sequence[str]) -> str:
    """The XML every memctl task shares around its own triggers and settings."""
    import subprocess
    from xml.sax.saxutils import escape

    command, *lead = [str(word) for word in memctl_cmd]
    arguments = subprocess.list2cmdline([*lead, *root_args, *args])
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- {MANAGED_MARK}: {mark} -->
<Task version="1.2" xmlns="{TASK_NS}">
  <RegistrationInfo>
    <Description>{escape(description)}</Description>
    <URI>\\{TASK_FOLDER}\\{name}</URI>
  </RegistrationInfo>
  <Triggers>{triggers}
  </Triggers>
  <Principals>
    <Principal id="Author">
      <LogonType>InteractiveToken</LogonType>
      <RunLevel>LeastPrivilege</RunLevel>
    </Principal>
  </Principals>
  <Settings>
    <MultipleInstancesPolicy>IgnoreNew</MultipleInstancesPolicy>
    <DisallowStartIfOnBatteries>false</DisallowStartIfOnBatteries>
    <StopIfGoingOnBatteries>false</StopIfGoingOnBatteries>{settings}
    <Enabled>true</Enabled>
  </Settings>
  <Actions Context="Author">
    <Exec>
      <Command>{escape(command)}</Command>
      <Arguments>{escape(arguments)}</Arguments>
    </Exec>
  </Actions>
</Task>
"""


def windows_tasks_for(memctl_cmd: Sequence[str], root: Path) -> list[UnitFile]:
    return [UnitFile(f"memctl-{job.name}.xml", task_xml(job, memctl_cmd, str(root))) for job in JOBS]


def default_windows_dir(env: dict[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("LOCALAPPDATA", "").strip()
    return (Path(base) if base else Path(env.get("HOME", str(Path.home()))) / ".config") / "memctl" / "tasks"


def windows_enable_commands(unit_dir: Path) -> list[str]:
    lines = [f'schtasks /Create /TN "{TASK_FOLDER}\\{job.name}" /XML "{unit_dir / f"memctl-{job.name}.xml"}" /F'
             for job in JOBS]
    return lines + [f'schtasks /Query /TN "{TASK_FOLDER}\\{JOBS[0].name}" /V /FO LIST   # next and last run']


# ---------------------------------------------------------------- contrib/


def contrib_files() -> dict[str, str]:
    """Relative path under contrib/ -> content, as shipped in the repository."""
    files = {f"systemd/{u.name}": u.text for u in contrib_systemd_units()}
    files["cron/memctl"] = contrib_cron_text()
    return files


# ---------------------------------------------------------------- the serve unit (opt-in)

SERVE_NAME = "serve"
SERVE_HOST = "127.0.0.1"


def serve_args(port: int) -> tuple[str, ...]:
    """Loopback only: a unit never exposes the memory to the network by itself."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise UsageError(f"--serve {port!r}: a port is a whole number from 1 to 65535")
    return ("serve", "--http", f"{SERVE_HOST}:{port}")


def render_serve_service(port: int, exec_words: Sequence[str], memctl_home: str) -> str:
    """A long-running service (not a timer): restarted when it fails, health at GET /health."""
    exec_start = " ".join([*exec_words, *serve_args(port)])
    return f"""\
# {MANAGED_MARK}: {SERVE_NAME}. Written by `memctl schedule install --systemd --serve`; a reinstall replaces it.
# Health: curl -fsS http://{SERVE_HOST}:{port}/health
[Unit]
Description=memctl serve: the memory's HTTP JSON API and MCP on {SERVE_HOST}:{port}

[Service]
Type=exec
Environment="MEMCTL_HOME={memctl_home}" LANG=C.UTF-8 PYTHONUTF8=1
ExecStart={exec_start}
Restart=on-failure
RestartSec=5s
SyslogIdentifier=memctl-{SERVE_NAME}
UMask=0077
{_HARDENING}RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6

[Install]
WantedBy=default.target
"""


def serve_systemd_unit_for(port: int, memctl_cmd: Sequence[str], root: Path) -> UnitFile:
    words = [systemd_escape_word(str(w)) for w in memctl_cmd]
    return UnitFile(f"memctl-{SERVE_NAME}.service", render_serve_service(port, words, systemd_escape_env(str(root))))


def serve_health_hint(port: int) -> str:
    return f"curl -fsS http://{SERVE_HOST}:{port}/health   # the health endpoint: 200 while it serves"


def serve_enable_commands(port: int) -> list[str]:
    return [f"systemctl --user enable --now memctl-{SERVE_NAME}.service", serve_health_hint(port)]


def serve_launchd_plist(port: int, memctl_cmd: Sequence[str], root: Path, home: Path | None = None) -> UnitFile:
    """A LaunchAgent kept alive while it fails (KeepAlive SuccessfulExit=false: on-failure)."""
    import plistlib

    logs = str((home or Path.home()) / "Library" / "Logs")
    spec = {
        "Label": f"{LAUNCHD_PREFIX}.{SERVE_NAME}",
        "ProgramArguments": [*map(str, memctl_cmd), *serve_args(port)],
        "EnvironmentVariables": {"MEMCTL_HOME": str(root), "LANG": "en_US.UTF-8", "PYTHONUTF8": "1"},
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ThrottleInterval": 5,
        "StandardOutPath": f"{logs}/memctl-{SERVE_NAME}.log",
        "StandardErrorPath": f"{logs}/memctl-{SERVE_NAME}.log",
        "Umask": 0o077,
    }
    text = plistlib.dumps(spec, sort_keys=False).decode("utf-8")
    mark = (f"<!-- {MANAGED_MARK}: {SERVE_NAME}. written by memctl schedule install (serve PORT); "
            f"health: GET http://{SERVE_HOST}:{port}/health -->\n")
    head, _, body = text.partition("<plist")
    return UnitFile(f"{LAUNCHD_PREFIX}.{SERVE_NAME}.plist", head + mark + "<plist" + body)


def serve_task_xml(port: int, memctl_cmd: Sequence[str], root: Path) -> UnitFile:
    """A Task Scheduler task started at logon, restarted on failure, with no time limit."""
    triggers = """
    <LogonTrigger><Enabled>true</Enabled></LogonTrigger>"""
    settings = """
    <ExecutionTimeLimit>PT0S</ExecutionTimeLimit>
    <RestartOnFailure><Interval>PT1M</Interval><Count>999</Count></RestartOnFailure>"""
    mark = f"{SERVE_NAME}. written by memctl schedule install (serve PORT); health: GET http://{SERVE_HOST}:{port}/health"
    text = _task_document(SERVE_NAME, mark, f"memctl serve on {SERVE_HOST}:{port}", triggers, settings,
                          memctl_cmd, ("--root", str(root)), serve_args(port))
    return UnitFile(f"memctl-{SERVE_NAME}.xml", text)
