"""`memctl tools`: the tool-usage collector's table, and `tools record`, one event from an agent
(what GenericAgent's plugin runs after each tool call; design.md §9a, memctl.learn.tools*)."""

from __future__ import annotations

import typer

from memctl.cli import render
from memctl.cli.state import read_stdin, state

tools_app = typer.Typer(
    help="Tool usage: calls and failures per tool, from the agent's tool calls and archived logs. "
         "A failure that repeats ([tools] lesson_after, 3) becomes a `tool` entry in L5.",
    invoke_without_command=True, no_args_is_help=False)

RECORD_USAGE = ('pipe one event as JSON on stdin, e.g. echo \'{"tool": "web_fetch", "ok": false, '
                '"error": "timeout after 30 s"}\' | memctl tools record')


def register(app: typer.Typer) -> None:
    app.add_typer(tools_app, name="tools")


@tools_app.callback()
def tools_table(
    ctx: typer.Context,
    json_out: bool = typer.Option(False, "--json", help="JSON Lines: one object per tool with its failure shapes."),
    limit: int = typer.Option(3, "--shapes", min=0, max=100, help="Failure shapes shown per tool in the table."),
) -> None:
    """Per tool: calls, failures, failure rate and the most frequent error shapes (numbers, paths
    and ids folded), most used tool first. Piped: tab-separated lines."""
    if ctx.invoked_subcommand is not None:
        return
    from memctl.learn.tools_store import read_summary

    settings = state(ctx).settings
    tools = sorted(read_summary(settings.layout).tools.values(), key=lambda t: (-t.calls, t.tool))
    if json_out:
        for stats in tools:
            render.json_line(stats.to_json())
        return
    if not tools:
        render.message("no tool calls recorded yet (the GenericAgent plugin records them; `memctl learn` reads "
                       "archived logs)")
        return
    rows = [(t.tool, t.calls, t.failures, f"{t.failure_rate:.0%}",
             "; ".join(f"{shape} ×{s.count}" for shape, s in t.top_shapes(limit))) for t in tools]
    if render.stdout_is_terminal():
        render.table(None, ("tool", "calls", "failures", "rate", "top error shapes"), rows)
    else:
        render.lines("\t".join(str(cell) for cell in row) for row in rows)


@tools_app.command("record")
def record(
    ctx: typer.Context,
    wait: float = typer.Option(5.0, "--wait", metavar="SECONDS",
                               help="Wait up to SECONDS for another memctl's write (then exit 75)."),
    json_out: bool = typer.Option(False, "--json", help="Report as one JSON object."),
) -> None:
    """Record one tool call: a JSON object on stdin with `tool` and `ok` (or `result`, the tool's
    output, classified here), `error`, `args`, `session`, `call` (the call's id: a repeated id
    counts once), `time`. Arguments and errors are redacted and cut short before they are kept."""
    from memctl.core import clock
    from memctl.core.redact import redactor_for
    from memctl.learn.tools import event_from_request
    from memctl.learn.tools_lessons import record_events

    settings = state(ctx).settings
    data = read_stdin(int(settings.get("tools", "max_event_bytes")), RECORD_USAGE)
    now = clock.iso()
    event = event_from_request(data, redactor_for(settings), now)
    report = record_events(settings, [event], now, wait)
    for lesson in report["lessons"]:
        if lesson["action"] in ("added", "superseded"):
            render.message(f"tool lesson {lesson['action']}: {lesson['text']}")
    if json_out:
        render.json_line(report)
