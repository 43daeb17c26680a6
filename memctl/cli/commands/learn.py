"""The write link's commands: `turn`, `compact`, `dispose` (design.md §9a; memctl.learn.session)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from memctl.cli import render, writes
from memctl.cli.state import state
from memctl.core.errors import UsageError

COMPACT_BUDGET = 400
SESSION_HELP = "The session's id, as the agent names it (any text up to 256 bytes; it never becomes a path as is)."
WAIT_HELP = "Seconds to wait for the session's lock and the writer lock."


def register(app: typer.Typer) -> None:
    app.command("turn")(turn_cmd)
    app.command("compact")(compact_cmd)
    app.command("dispose")(dispose_cmd)


def turn_cmd(
    ctx: typer.Context,
    session: str = typer.Option(..., "--session", help=SESSION_HELP),
    file: Optional[Path] = typer.Option(None, "--file", help="Read the messages from this file instead of stdin."),
    wait: float = typer.Option(30.0, "--wait", help=WAIT_HELP),
    json_out: bool = typer.Option(False, "--json", help="Report as one JSON object."),
) -> None:
    """Buffer a session's messages: JSON Lines (or one JSON array) of {"id", "role": "user|assistant|tool",
    "content", "time": ISO 8601, "speaker", "tool_calls"}, only role and content required.
    Exit 0 means every message is on disk (fsynced). A retried message (the same id; without one,
    the same role, content, time and speaker) is not buffered twice; a batch with any bad message
    buffers none. At [learn] turns or bytes unprocessed, they are extracted into L5."""
    from memctl.learn import buffer, session as sessions

    settings = writes.memory_settings(state(ctx).settings)
    limit = int(settings.get("learn", "max_session_bytes"))
    items = buffer.parse_messages(_read_input(file, limit))
    outcome = sessions.turn(settings, session, items, wait)
    _notes(outcome)
    writes.start_background_index(settings)  # a memory with no index gets it built
    if json_out:
        render.json_line(outcome.to_dict())
        return
    render.line(f"{outcome.buffered} of {outcome.received} messages buffered ({outcome.messages} in the session, "
                f"{outcome.processed} processed, {len(outcome.learned())} learned now)")


def compact_cmd(
    ctx: typer.Context,
    session: str = typer.Option(..., "--session", help=SESSION_HELP),
    budget: int = typer.Option(COMPACT_BUDGET, "--budget", help="Tokens the summary may take (estimated as compose "
                                                               f"does). Default {COMPACT_BUDGET}."),
    wait: float = typer.Option(30.0, "--wait", help=WAIT_HELP),
    json_out: bool = typer.Option(False, "--json", help="One JSON object: the summary and what was learned."),
) -> None:
    """Extract and route what is unprocessed, then print a compressed summary of the session so
    far, sized to the budget: what was asked, what was learned, the last messages."""
    from memctl.learn import session as sessions

    settings = writes.memory_settings(state(ctx).settings)
    outcome = sessions.compact(settings, session, budget, wait)
    _notes(outcome)
    writes.start_background_index(settings)  # a memory with no index gets it built
    if json_out:
        render.json_line(outcome.to_dict())
        return
    render.raw_bytes(outcome.summary.encode("utf-8", "surrogateescape"))


def dispose_cmd(
    ctx: typer.Context,
    session: str = typer.Option(..., "--session", help=SESSION_HELP),
    wait: float = typer.Option(30.0, "--wait", help=WAIT_HELP),
    json_out: bool = typer.Option(False, "--json", help="One JSON object: the summary, its tags, what was learned."),
) -> None:
    """End a session: extract the rest, leave its summary and tags in L2 short-term
    (short_term.jsonl, read by `recent` and `compose`), and close it. Disposing it again
    changes nothing; a new message to it is refused."""
    from memctl.learn import session as sessions

    settings = writes.memory_settings(state(ctx).settings)
    outcome = sessions.dispose(settings, session, wait)
    _notes(outcome)
    writes.start_background_index(settings)  # a memory with no index gets it built
    if json_out:
        render.json_line(outcome.to_dict())
        return
    render.raw_bytes(outcome.summary.encode("utf-8", "surrogateescape"))


def _read_input(file: Optional[Path], limit: int) -> bytes:
    """At most `limit` bytes of the file or stdin; more is refused, not cut."""
    if file is None:
        if sys.stdin is None or sys.stdin.isatty():
            raise UsageError("no messages: pipe JSON Lines into `memctl turn`, or pass --file FILE")
        data = sys.stdin.buffer.read(limit + 1)
    else:
        try:
            with open(file, "rb") as handle:
                data = handle.read(limit + 1)
        except OSError as exc:
            raise UsageError(f"--file {file}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise UsageError(f"the input is over {limit} bytes ([learn] max_session_bytes); send it in smaller turns")
    return data


def _notes(outcome) -> None:
    for note in outcome.notes:
        render.warning(note)
