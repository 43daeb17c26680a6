"""Operator and agent-facing subcommands: `schedule install`, `insight`, `task`."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

from memctl.core import clock
from memctl.core.config import load_settings

from memctl.agent import insight

from memctl.cli import render

from memctl.ops import schedule

from memctl.agent import tasks
from memctl.cli.state import state
from memctl.core.errors import EXIT_NO_MATCH, NotFound, UsageError
from memctl.core.redact import redactor_for

schedule_app = typer.Typer(help="Install the 12-hourly archive and the 04:00 dream as timers "
                            "(systemd, cron, launchd, Windows Task Scheduler).", no_args_is_help=True)
insight_app = typer.Typer(help="L1, the insight index an agent reads every turn.", no_args_is_help=True)
task_app = typer.Typer(help="The working layer: an agent's active task state (working/<id>.json).", no_args_is_help=True)

WAIT_HELP = "Wait up to this many seconds for the writer lock (a dream or archive may hold it)."


def register(app: typer.Typer) -> None:
    app.add_typer(schedule_app, name="schedule")
    app.add_typer(insight_app, name="insight")
    app.add_typer(task_app, name="task")


def _require_memory(root: Path) -> None:
    """Refuse to write into a folder that is not a memory (taking the lock would create it)."""
    if not (root / ".memctl").is_dir():
        raise NotFound(f"{root} is not a memory folder yet; run `memctl --root {root} init`")


def _memctl_command(override: Optional[str]) -> list[str]:
    """How a timer should call memctl: --memctl, else this very console script, else python -m."""
    if override:
        return [os.path.abspath(os.path.expanduser(override))]
    argv0 = Path(sys.argv[0])
    if argv0.name == "memctl" and argv0.exists():
        return [os.path.abspath(argv0)]
    return [sys.executable, "-m", "memctl"]


@schedule_app.command("install")
def schedule_install(
    ctx: typer.Context,
    systemd: bool = typer.Option(False, "--systemd", help="Write systemd user units (timers)."),
    cron: bool = typer.Option(False, "--cron", help="Print crontab lines to add (nothing is changed)."),
    launchd: bool = typer.Option(False, "--launchd", help="macOS: write LaunchAgent plists [~/Library/LaunchAgents]."),
    windows: bool = typer.Option(False, "--windows", help="Windows: write Task Scheduler XML and print the schtasks commands."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be written; change nothing."),
    unit_dir: Optional[Path] = typer.Option(None, "--unit-dir", help="Where to write the files [the platform's place]."),
    memctl_path: Optional[str] = typer.Option(None, "--memctl", help="memctl executable the timers run [this one]."),
    force: bool = typer.Option(False, "--force", help="Replace files memctl did not write."),
    serve_port: Optional[int] = typer.Option(None, "--serve", metavar="PORT",
        help="Also write a service that keeps `memctl serve --http 127.0.0.1:PORT` running, restarted on "
             "failure (not with --cron); its health endpoint is GET http://127.0.0.1:PORT/health."),
) -> None:
    """Write the archive (00:00 and 12:00) and dream (04:00) schedules with this machine's paths;
    with --serve PORT, also a service that keeps `memctl serve` running on 127.0.0.1:PORT."""
    if [systemd, cron, launchd, windows].count(True) != 1:
        raise UsageError("choose one of --systemd, --cron, --launchd or --windows")
    if cron and serve_port is not None:
        raise UsageError("--serve writes a service, which cron cannot keep running; use --systemd, --launchd or --windows")
    if serve_port is not None:
        schedule.serve_args(serve_port)
    root = state(ctx).root_to_create
    command = _memctl_command(memctl_path)
    if not (root / ".memctl").is_dir():
        render.warning(f"{root} is not initialised yet; run `memctl --root {root} init` before the first run")
    else:
        _note_when_nothing_to_archive(root)
    if cron:
        render.raw_bytes(schedule.cron_text_for(command, root).encode("utf-8"))
        for hint in schedule.cron_install_hint(root):
            render.message(hint)
        return
    if launchd:
        target = unit_dir or schedule.default_launchd_dir()
        units, enable = schedule.launchd_units_for(command, root), schedule.launchd_enable_commands(target)
    elif windows:
        target = unit_dir or schedule.default_windows_dir()
        units, enable = schedule.windows_tasks_for(command, root), schedule.windows_enable_commands(target)
    else:
        target = unit_dir or schedule.default_unit_dir()
        units, enable = schedule.systemd_units_for(command, root), schedule.enable_commands()
    if serve_port is not None:
        unit, serve_enable = _serve_unit(serve_port, command, root, target, launchd, windows)
        units, enable = [*units, unit], [*enable, *serve_enable]
    _install_and_report(units, target, enable, dry_run, force)


def _serve_unit(port: int, command: list[str], root: Path, target: Path, launchd: bool, windows: bool):
    """The opt-in `memctl serve` service in the chosen format, and how to start it."""
    health = schedule.serve_health_hint(port)
    if launchd:
        unit = schedule.serve_launchd_plist(port, command, root)
        return unit, [f'launchctl bootstrap gui/"$(id -u)" {shlex.quote(str(target / unit.name))}', health]
    if windows:
        unit = schedule.serve_task_xml(port, command, root)
        return unit, [f'schtasks /Create /TN "{schedule.TASK_FOLDER}\\{schedule.SERVE_NAME}" /XML "{target / unit.name}" /F',
                      health]
    return schedule.serve_systemd_unit_for(port, command, root), schedule.serve_enable_commands(port)


def _note_when_nothing_to_archive(root: Path) -> None:
    """The archive job of a memory without agent logs runs, finds nothing and says so (its
    `--missing-ok`); the user hears why now rather than from the journal."""
    raw_dir = load_settings(root).raw_dir(None)
    if not os.path.lexists(raw_dir):
        render.message(f"note: no raw-log folder at {raw_dir}: the archive job will have nothing to archive "
                       "until agent logs are written there (or [archive] raw_dir names their folder)")


def _install_and_report(units, target: Path, enable: list[str], dry_run: bool, force: bool) -> None:
    results = schedule.install_units(units, target, dry_run=dry_run, force=force)
    if dry_run:
        for unit, result in zip(units, results):
            render.line(f"# {result.path} (would {result.action})")
            render.raw_bytes(unit.text.encode("utf-8"))
            render.line("")
    else:
        for result in results:
            render.line(f"{result.action}\t{result.path}")
    render.message("to enable:" if not dry_run else "after installing, enable with:")
    for command_line in enable:
        render.message(f"  {command_line}")


@insight_app.command("rebuild")
def insight_rebuild(
    ctx: typer.Context,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the new L1 instead of writing it."),
    json_out: bool = typer.Option(False, "--json", help="Report as one JSON object."),
) -> None:
    """Regenerate memctl's lines of global_mem_insight.txt (pointers, L0-L4 index, L5 scenes);
    every other line stays byte for byte. The previous file goes to .memctl/insight/."""
    app_state = state(ctx)
    settings = app_state.settings
    layout = settings.layout
    limits = (settings.get("insight", "max_lines"), settings.get("insight", "max_bytes"))
    _require_memory(layout.root)
    if dry_run:
        result = insight.rebuild(layout, *limits, scrub=redactor_for(settings))
    else:
        with app_state.writer_lock():
            result = insight.rebuild(layout, *limits, scrub=redactor_for(settings))
            saved = insight.write_rebuilt(layout, result.text)
            if saved:
                render.message(f"previous L1 kept as {saved}; `memctl insight restore` puts it back")
    for warning in result.warnings:
        render.warning(warning)
    report = {
        "path": str(layout.insight),
        "written": not dry_run,
        "lines": result.lines,
        "bytes": result.bytes,
        "shown": result.counts,
        "total": result.totals,
    }
    if json_out:
        render.json_line({**report, "text": result.text} if dry_run else report)
    elif dry_run:
        render.raw_bytes(result.text.encode("utf-8", "surrogateescape"))
    else:
        render.line(f"{layout.insight}\t{result.lines} lines\t{result.bytes} bytes")


@insight_app.command("restore")
def insight_restore(ctx: typer.Context) -> None:
    """Put back the L1 the last `insight rebuild` (or restore) replaced; the current one is kept."""
    app_state = state(ctx)
    layout = app_state.settings.layout
    _require_memory(layout.root)
    with app_state.writer_lock():
        restored = insight.restore_previous(layout)
    render.message(f"restored {layout.insight} from {restored}")


@insight_app.command("check")
def insight_check(
    ctx: typer.Context,
    json_out: bool = typer.Option(False, "--json", help="One JSON object per violation."),
) -> None:
    """Lint global_mem_insight.txt: limits, pointers to missing files, secrets. Exit 1 on a finding."""
    settings = state(ctx).settings
    layout = settings.layout
    violations = insight.check(layout, settings.get("insight", "max_lines"), settings.get("insight", "max_bytes"))
    for v in violations:
        if json_out:
            render.json_line({"path": str(layout.insight), "line": v.line, "kind": v.kind, "message": v.message})
        else:
            render.line(f"{layout.insight}:{v.line}: {v.kind}: {v.message}")
    if violations:
        raise typer.Exit(EXIT_NO_MATCH)


@task_app.command("save")
def task_save(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., metavar="ID", help="Task id (letters, digits, . _ -)."),
    wait: float = typer.Option(10.0, "--wait", help=WAIT_HELP),
    json_out: bool = typer.Option(False, "--json", help="Report as one JSON object."),
) -> None:
    """Save a task's state: JSON on stdin, at most 10 KB, secrets redacted."""
    tasks.check_id(task_id)
    if sys.stdin.isatty():
        raise UsageError(f"pipe the task state as JSON on stdin, e.g. echo '{{\"step\": 2}}' | memctl task save {task_id}")
    data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode("utf-8")
    task_state = tasks.parse_state(data)
    app_state = state(ctx)
    settings = app_state.settings
    _require_memory(settings.layout.root)
    with app_state.writer_lock(wait):
        task = tasks.save(settings.layout, task_id, task_state, clock.iso(), scrub=redactor_for(settings))
    if json_out:
        render.json_line({"id": task.id, "path": str(task.path), "saves": task.saves, "bytes": task.state_bytes})
    else:
        render.line(str(task.path))


@task_app.command("list")
def task_list(
    ctx: typer.Context,
    json_out: bool = typer.Option(False, "--json", help="One JSON object per task."),
) -> None:
    """Open tasks, most recently saved first (an interrupted task stays here until done)."""
    for task in tasks.list_tasks(state(ctx).settings.layout):
        if json_out:
            render.json_line({"id": task.id, "created": task.created, "updated": task.updated,
                              "saves": task.saves, "bytes": task.state_bytes})
        else:
            render.line(f"{task.id}\t{task.updated}\t{task.saves} saves\t{task.state_bytes} bytes")


@task_app.command("show")
def task_show(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., metavar="ID"),
    json_out: bool = typer.Option(False, "--json", help="The state with its id, times and save count."),
) -> None:
    """Print a task's saved state (the JSON given to `task save`), to resume it."""
    task = tasks.show(state(ctx).settings.layout, task_id)
    if json_out:
        render.json_line(task.to_dict())
    else:
        render.line(render.json_text(task.state))


@task_app.command("done")
def task_done(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., metavar="ID"),
    topic: Optional[str] = typer.Option(None, "--topic", help="Topic of the L5 case entry [state's topic, else ID]."),
    wait: float = typer.Option(10.0, "--wait", help=WAIT_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the new L5 entry as JSON."),
) -> None:
    """Finish a task: its final state becomes an L5 `case` entry and the working file goes."""
    app_state = state(ctx)
    _require_memory(app_state.root)
    with app_state.writer_lock(wait):
        entry = tasks.done(app_state.settings.layout, task_id, clock.iso(), topic)
    if json_out:
        render.json_line(entry.to_dict())
    else:
        render.line(entry.id)
