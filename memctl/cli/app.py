"""The command line: parse, call a module, render. Decisions live in the modules.

Subcommands are grouped in `memctl/cli/commands/` (one file per concern, like pipx's commands/);
this file builds the app, resolves the root and maps errors to exit codes.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

import typer

from memctl import __version__

from memctl.cli import render
from memctl.core.errors import EXIT_ERROR, EXIT_OK, MemctlError
from memctl.cli.startup import flush_stdout, internal_error_text, os_error_text, prepare_process, silence_stdout
from memctl.cli.state import AppState

app = typer.Typer(
    name="memctl",
    help=(
        "Layered, long-lived memory for AI agents, kept as plain files in one folder.\n\n"
        "The root is --root (before or after the subcommand), else $MEMCTL_HOME, else ./memory "
        "if it exists, else $XDG_DATA_HOME/memctl (~/.local/share/memctl). A GenericAgent "
        "checkout given as the root means its memory/."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        render.line(f"memctl {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _main(
    ctx: typer.Context,
    root: Optional[str] = typer.Option(None, "--root", help="Memory root folder (overrides $MEMCTL_HOME)."),
    debug: bool = typer.Option(False, "--debug", help="Show a full traceback on unexpected errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    ctx.obj = AppState(root_option=root, debug=debug)


def _register_commands() -> None:
    from memctl.cli.commands import backfill, health, l4, learn, longterm, operator, search, serve, setup, team, tools

    for module in (setup, l4, search, longterm, learn, backfill, operator, health, team, serve, tools):
        module.register(app)


_register_commands()


def main(argv: Optional[list[str]] = None) -> None:
    """Entry point: map every failure to one line on stderr and a documented exit code."""
    os.umask(0o077)
    args = prepare_process(list(sys.argv[1:] if argv is None else argv))
    debug = "--debug" in args or bool(os.environ.get("MEMCTL_DEBUG"))
    try:
        app(args=args, prog_name="memctl")
    except SystemExit:
        flush_stdout()
        raise
    except MemctlError as exc:
        flush_stdout()
        render.error(str(exc))
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        silence_stdout()
        sys.exit(EXIT_OK)
    except OSError as exc:  # permission denied, read-only file system, disk full: one line
        if debug:
            raise
        flush_stdout()
        render.error(os_error_text(exc))
        sys.exit(EXIT_ERROR)
    except KeyboardInterrupt:
        render.error("interrupted")
        sys.exit(130)
    except Exception as exc:  # a crash is exit 2 with one line, never exit 1 ("no match")
        if debug:
            raise
        render.error(internal_error_text(exc))
        sys.exit(EXIT_ERROR)
