"""`memctl learn`: the write link over archived sessions (memctl.learn.backfill)."""

from __future__ import annotations

from typing import Optional

import typer

from memctl.cli import render
from memctl.cli.state import state
from memctl.core.errors import EXIT_PARTIAL


def register(app: typer.Typer) -> None:
    app.command("learn")(learn)


def learn(
    ctx: typer.Context,
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Learn at most N sessions this run (the rest next time)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the sessions a run would learn; change nothing."),
    wait: float = typer.Option(30.0, "--wait", metavar="SECONDS",
                               help="Wait up to SECONDS for another memctl's write at each step (then exit 75)."),
    json_out: bool = typer.Option(False, "--json", help="Report as one JSON object."),
) -> None:
    """Extract typed memories from every archived L4 session not learned before (memctl's
    archive, GenericAgent's adopted one) into L5, and count their tool calls (`memctl tools`).
    Resumable: each session is checkpointed once its entries are written, so a killed run
    goes on where it stopped and a second run writes nothing twice. A progress line on a terminal.
    The search index is brought up to date with what was learned (built, if there was none)."""
    from memctl.core import clock
    from memctl.learn.backfill import learn_archived

    settings = state(ctx).settings
    progress = _progress_line if render.stderr_is_terminal() and not json_out else None
    report = learn_archived(settings, clock.iso(), limit, wait, dry_run, progress)
    if progress is not None:
        render.message("")
    if report.learned and not dry_run:  # the next search finds what was learned indexed
        from memctl.recall.indexing.index import refresh_after_write

        for warning in refresh_after_write(settings):
            render.warning(warning)
    if dry_run:
        for name in report.pending:
            render.line(name)
        render.message(f"would learn {len(report.pending)} of {report.sessions} archived sessions "
                       f"({report.learned_before} learned before)")
        return
    if json_out:
        render.json_line(report.to_dict())
    else:
        render.line(f"learned {report.learned} sessions ({report.learned_before} before, {report.sessions} archived): "
                    f"{report.messages} messages, {report.candidates} candidates ({_actions(report.actions)}), "
                    f"{report.tool_events} tool calls, {report.lessons} tool lessons in {report.seconds:.1f} s")
        for error in report.errors:
            render.error(error)
    if report.errors:
        raise typer.Exit(EXIT_PARTIAL)


def _progress_line(done: int, total: int) -> None:
    import sys

    sys.stderr.write(f"\rlearn: {done}/{total} sessions")
    sys.stderr.flush()


def _actions(actions: dict[str, int]) -> str:
    return ", ".join(f"{count} {action}" for action, count in sorted(actions.items())) or "none written"
