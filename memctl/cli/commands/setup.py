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
    semantic: bool = typer.Option(False, "--semantic",
                                  help="Turn the embedding model on for this memory: embed its items now with the "
                                       "installed model ([semantic-multilingual] or [semantic] extra, no memctl.toml "
                                       "line needed); later imports and archives embed theirs in the background."),
) -> None:
    """Create the memory layout in PATH, else the root (idempotent; folders 0700, files 0600). In a
    GenericAgent checkout (or --root at it) also adopt its archive, hand its 12-hour archiver
    to memctl and install the recall plugin; see README, "GenericAgent users". With --semantic,
    also embed the memory's items (README, "Optional semantic signal")."""
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
    _report_changes(done, root, created, json_out, _opt_in_to_the_model(root) if semantic else None)


def _opt_in_to_the_model(root) -> dict:
    """--semantic: every item embedded with the model in use (an empty `[semantic] model`: the
    installed one, memctl.recall.embeddings.semantic_status), which opts the memory in: from then on
    `import` and `archive` embed their items in the background and a search says when vectors
    lag behind the index."""
    from memctl.cli.commands.search import embed_now
    from memctl.core.errors import MemctlError
    from memctl.core.extras import install_hint
    from memctl.recall.ranking.ranking import Ranking
    from memctl.recall.embeddings.semantic_status import installed_model

    settings = load_settings(root)
    if not Ranking.from_settings(settings).semantic_option("model") and installed_model() is None:
        raise MemctlError(f"no embedding model is installed: {install_hint('semantic-multilingual')}, "
                          "for Chinese and English")
    report = embed_now(settings)
    return {"model": report.model, "rows": report.rows, "embedded": report.embedded,
            "seconds": round(report.seconds, 3), "summary": f"semantic signal on: {report.summary()}"}


def _init_server(root) -> list[str]:
    """A memory whose `[store] backend` is "postgres": its schema created or migrated."""
    from memctl.ops import server

    settings = load_settings(root)
    if not server.on_server(settings):
        return []
    result = server.initialise(settings)
    versions = ", ".join(f"{component} v{number}" for component, number in result["versions"].items())
    return [f"schema {result['schema']} at {result['where']} is ready ({versions})"]


def _report_changes(done: list[str], root, created: list | None, json_out: bool, semantic: dict | None = None) -> None:
    """`created` is None for an undo, which creates nothing; `semantic`: --semantic's embedding pass."""
    if json_out:
        extra = {"semantic": {k: v for k, v in semantic.items() if k != "summary"}} if semantic else {}
        render.json_line({"root": str(root), "created": [str(p) for p in created or []], "genericagent": done, **extra})
        return
    render.line(str(root))
    if created is not None:
        render.message(f"initialised {root} ({len(created)} new)" if created else f"{root} is already initialised")
    for sentence in [*done, *([semantic["summary"]] if semantic else [])]:
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
