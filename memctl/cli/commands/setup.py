"""`init` and `rules`: create a memory root and show the rules and thresholds in force."""

from __future__ import annotations

from typing import Optional

import typer

from memctl.cli import render
from memctl.cli.state import state
from memctl.core.config import META_RULES, effective_settings, init_root, load_settings
from memctl.core.errors import UsageError


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("rules")(rules)


def init(
    ctx: typer.Context,
    path: Optional[str] = typer.Argument(None, metavar="[PATH]",
                                         help="The folder to make a memory (the same as --root PATH)."),
    json_out: bool = typer.Option(False, "--json", help="Report as one JSON object."),
    no_plugin: bool = typer.Option(False, "--no-plugin", help="GenericAgent checkout: no recall plugin."),
    undo_genericagent: bool = typer.Option(False, "--undo-genericagent",
                                           help="GenericAgent checkout: restore its archiver, remove the plugin."),
) -> None:
    """Create the memory layout in PATH, else the root (idempotent; folders 0700, files 0600). In a
    GenericAgent checkout (or --root at it) also adopt its archive, hand its 12-hour archiver
    to memctl and install the recall plugin; see README, "GenericAgent users"."""
    from memctl.ops import genericagent

    app_state = state(ctx)
    if path is not None:
        if not path.strip():
            raise UsageError("init PATH: an empty path names no folder")
        if app_state.root_option is not None and app_state.root_option != path:
            raise UsageError(f"init was given two folders: --root {app_state.root_option} and {path}; give one")
        app_state.root_option = path
    root = app_state.root_to_create
    found = genericagent.find_checkout(root)
    if undo_genericagent:
        if found is None:
            raise UsageError(f"{root} is not a GenericAgent checkout (memory/ and temp/model_responses/)")
        _report_changes(genericagent.undo(found[0]).done, found[1], None, json_out)
        return
    root = found[1] if found else root
    created = init_root(root)
    done = []
    if found:
        app_state.root_option = str(root)
        with app_state.writer_lock():
            done = genericagent.set_up_checkout(found[0], root, plugin=not no_plugin).done
    done += _init_server(root)
    _report_changes(done, root, created, json_out)


def _init_server(root) -> list[str]:
    """A memory whose `[store] backend` is "postgres": its schema created or migrated."""
    from memctl.ops import server

    settings = load_settings(root)
    if not server.on_server(settings):
        return []
    result = server.initialise(settings)
    versions = ", ".join(f"{component} v{number}" for component, number in result["versions"].items())
    return [f"schema {result['schema']} at {result['where']} is ready ({versions})"]


def _report_changes(done: list[str], root, created: list | None, json_out: bool) -> None:
    """`created` is None for an undo, which creates nothing."""
    if json_out:
        render.json_line({"root": str(root), "created": [str(p) for p in created or []], "genericagent": done})
        return
    render.line(str(root))
    if created is not None:
        render.message(f"initialised {root} ({len(created)} new)" if created else f"{root} is already initialised")
    for sentence in done:
        render.message(sentence)


def rules(
    ctx: typer.Context,
    json_out: bool = typer.Option(False, "--json", help="Print rules and settings as JSON."),
) -> None:
    """Print the L0 meta rules and every threshold in force, with where each value came from."""
    settings = state(ctx).settings
    rows = effective_settings(settings)
    if json_out:
        render.json_line(
            {
                "root": str(settings.layout.root),
                "rules": list(META_RULES),
                "settings": [{"key": k, "value": v, "origin": o} for k, v, o in rows],
            }
        )
        return
    render.line(f"# memctl rules for {settings.layout.root}")
    for number, rule in enumerate(META_RULES, start=1):
        render.line(f"L0.{number}  {rule}")
    render.line("")
    render.line("# settings (key = value  [origin])")
    for key, value, origin in rows:
        render.line(f"{key} = {render.json_text(value)}  [{origin}]")
