"""`init` and `rules`: create a memory root and show the rules and thresholds in force."""

from __future__ import annotations

import typer

from memctl.cli import render
from memctl.cli.state import state
from memctl.core.config import META_RULES, effective_settings, init_root


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("rules")(rules)


def init(
    ctx: typer.Context,
    json_out: bool = typer.Option(False, "--json", help="Report as one JSON object."),
) -> None:
    """Create the memory layout in the root (idempotent; folders 0700, files 0600)."""
    app_state = state(ctx)
    root = app_state.root_to_create
    created = init_root(root)
    if json_out:
        render.json_line({"root": str(root), "created": [str(p) for p in created]})
        return
    render.line(str(root))
    render.message(f"initialised {root} ({len(created)} new)" if created else f"{root} is already initialised")


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
