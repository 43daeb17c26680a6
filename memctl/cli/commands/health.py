"""Health and recall subcommands: `verify`, `status`, `recent`, `compose` (design.md §9)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from memctl.cli import render
from memctl.cli.state import apply_team_purges, state
from memctl.core.errors import EXIT_PARTIAL, NotFound


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)
    app.command("status")(status)
    app.command("recent")(recent)
    app.command("compose")(compose)


def _require_root(root: Path) -> None:
    if not root.is_dir():
        raise NotFound(f"{root} does not exist; `memctl --root {root} init` creates a memory there")


def verify(
    ctx: typer.Context,
    json_out: bool = typer.Option(False, "--json", help="JSON Lines: one finding a line, then a summary record."),
    repair: bool = typer.Option(False, "--repair", help="First move torn and unparseable lines to .memctl/torn/, "
                                "finish cut-off operations, sweep temp files of killed runs; print what was done."),
    wait: float = typer.Option(10.0, "--wait", help="With --repair: seconds to wait for the writer lock."),
    strict: bool = typer.Option(False, "--strict", help="Exit 3 on warnings too."),
) -> None:
    """Read everything back: zips against the manifest (CRC, sha256), the history file, L1
    limits, permissions, secrets in L1-L3, L5/L6 lines. One line per finding
    (`path: kind: message`, `[warning]` for hygiene). Exit 0 when there is no error
    (warnings are shown), 3 on an integrity error (or any warning with --strict)."""
    from memctl.ops.integrity import verify as run_verify

    settings = state(ctx).settings
    _require_root(settings.layout.root)
    if repair:
        _repair(settings.layout, wait)
    report = run_verify(settings.layout, settings.get("insight", "max_lines"), settings.get("insight", "max_bytes"),
                        tuple(settings.get("redaction", "extra_patterns")),
                        max_member_bytes=settings.get("index", "max_member_bytes"))
    for finding in report.findings:
        render.json_line(finding.to_json()) if json_out else render.line(finding.line())
    summary = report.summary()
    if json_out:
        render.json_line(summary)
    checked = summary["checked"]
    failed = bool(report.errors or (strict and report.warnings))
    if report.ok and not render.stderr_is_terminal():
        return  # silent on success, for cron
    render.message(f"verify: {summary['errors']} errors, {summary['warnings']} warnings; checked {checked['sessions']} "
                   f"sessions in {checked['zips']} zips, {checked['history_blocks']} history blocks, "
                   f"{checked['files']} files, {checked['entries']} entries")
    if failed:
        raise typer.Exit(EXIT_PARTIAL)


def _repair(layout, wait: float) -> None:
    from memctl.ops.repair import repair

    report = repair(layout, wait)
    for line in report.actions:
        render.message(f"repair: {line}")
    for line in report.problems:
        render.warning(line)
    if not report.actions and not report.problems:
        render.message("repair: nothing to repair")


def status(
    ctx: typer.Context,
    json_out: bool = typer.Option(False, "--json", help="One JSON object."),
) -> None:
    """Per layer files, entries and bytes; pending raw logs; last archive and dream runs; index freshness."""
    from memctl.ops.status import collect

    settings = state(ctx).settings
    _require_root(settings.layout.root)
    result = collect(settings)
    if json_out:
        render.json_line(result.to_json())
        return
    render.line(f"root\t{result.root}")
    render.line(f"store\t{result.backend}\t{result.where}")
    if result.backend != "files":
        render.line(f"machines\t{len(result.machines)}\t{' '.join(result.machines)}".rstrip())
        waiting = result.purge_orders
        render.line(f"purge orders\t{len(waiting)} not applied everywhere" if waiting else "purge orders\tnone waiting")
        for order in waiting:
            render.line(f"purge order\t{order['run']}\t{order['at']}\twaiting on {' '.join(order['waiting_on'])}")
    for layer in result.layers:
        bad = f"\t{layer.bad_lines} {'line not an entry' if layer.bad_lines == 1 else 'lines not entries'} " \
              "(`memctl verify` lists them)" if layer.bad_lines else ""
        render.line(f"{layer.layer}\t{layer.files} files\t{layer.entries} {layer.unit}\t{layer.bytes} bytes{bad}")
    origin = result.l4_sessions
    if origin:
        render.line(f"L4 archived by\tmemctl {origin.get('memctl', 0)} sessions\t"
                    f"GenericAgent {origin.get('genericagent', 0)} sessions (adopted as written, lossy)")
    render.line(f"pending raw logs\t{result.pending_raw} files\t{result.pending_raw_bytes} bytes\t{result.raw_dir}")
    render.line(f"active tasks\t{result.active_tasks}")
    render.line(f"last archive\t{result.last_archive or 'never'}")
    dream = result.last_dream
    render.line(f"last dream\t{dream.get('at', 'never')}\t{dream.get('run', '')}\t{dream.get('op', '')}".rstrip())
    index = result.index
    if index.get("on_server"):
        shared = "on server" if index["usable"] else ("missing" if not index["exists"] else "older: run `memctl init`")
        render.line(f"index\t{shared}\t{index['items']} items\t{index['path']}")
        return
    freshness = "missing" if not index["exists"] else ("fresh" if index["fresh"] else "stale")
    render.line(f"index\t{freshness}\tbuilt {index['built'] or '-'}\tnewest layer file {index['newest_layer_file'] or '-'}")


def recent(
    ctx: typer.Context,
    n: int = typer.Option(5, "-n", help="How many sessions, newest first."),
    json_out: bool = typer.Option(False, "--json", help="JSON Lines: one session a line."),
) -> None:
    """The last N sessions, newest first: the short-term window (sessions `memctl dispose` closed
    within [learn] short_term_days: summary and tags), then archived sessions (first request,
    final answer, key lines, tags; at most 2 KB each) - what a fresh agent needs to pick up
    where it left off."""
    from memctl.agent.recent import recent as run_recent
    from memctl.core.redact import redactor_for

    settings = state(ctx).settings
    _require_root(settings.layout.root)
    apply_team_purges(settings)
    sessions = run_recent(settings.layout, max(0, n), scrub=redactor_for(settings), settings=settings)
    for number, session in enumerate(sessions):
        if json_out:
            render.json_line(session.to_json())
        else:
            if number:
                render.line("")
            render.raw_bytes(session.text.encode("utf-8", "surrogateescape"))


COMPOSE_STDIN_LIMIT = 1 << 20


def compose(
    ctx: typer.Context,
    query: list[str] = typer.Argument(..., metavar="QUERY",
                                      help="What the next turn is about; `-` reads it from stdin (a long "
                                           "request, or one other users must not see in `ps`)."),
    budget: Optional[int] = typer.Option(None, "--budget",
                                         help="Token budget of the whole block (estimated; see README); "
                                              "default [compose] budget, 1500."),
    no_l1: bool = typer.Option(False, "--no-l1", help="Leave out L1, for an agent whose prompt holds it already "
                                                      "(GenericAgent's system prompt does)."),
    json_out: bool = typer.Option(False, "--json", help="JSON Lines: one line per item used, then a summary with the text."),
) -> None:
    """The memory block an agent injects before a turn: L1, the active task, recent sessions,
    matching L2 sections, the best L5 entries and L4 snippets - deduplicated, cut to the
    budget, labelled as recalled memory rather than instructions."""
    from memctl.agent.compose import compose as run_compose

    settings = state(ctx).settings
    _require_root(settings.layout.root)
    if budget is None:
        budget = int(settings.get("compose", "budget"))
    text = " ".join(query)
    if query == ["-"]:
        text = _query_from_stdin()
    apply_team_purges(settings)
    result = run_compose(settings, text, budget, leave_out=frozenset({"l1"} if no_l1 else ()))
    if json_out:
        for item in result.items:
            render.json_line(item.to_json())
        render.json_line(result.summary())
    else:
        render.raw_bytes(result.text.encode("utf-8", "surrogateescape"))


def _query_from_stdin() -> str:
    from memctl.cli.state import read_stdin
    from memctl.core.errors import UsageError

    data = read_stdin(COMPOSE_STDIN_LIMIT, "`compose -` reads the query from stdin; pipe it, e.g. "
                                           "echo 'what port?' | memctl compose -")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("the query on stdin is not UTF-8 text") from None
