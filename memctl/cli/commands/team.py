"""Team memory on a PostgreSQL server (issue #14): `export` writes L5, L6 and the dream log
as the file backend keeps them; `import-files` loads a file memory's into the server.

`import-files` is not an option of `import`: `import` turns foreign JSON Lines into new
entries (ids derived, secrets redacted, types checked), while this copies memctl's own three
files byte for byte; none of the one's options would mean anything to the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from memctl.cli import render
from memctl.cli.state import state
from memctl.core.errors import NotFound, UsageError


def register(app: typer.Typer) -> None:
    app.command("export")(export_cmd)
    app.command("import-files")(import_files_cmd)
    app.command("retire-machine")(retire_machine_cmd)


def export_cmd(
    ctx: typer.Context,
    to: Optional[Path] = typer.Option(None, "--to", help="Folder to write the three files into "
                                      "(default: the memory root, which makes it a file memory again)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object: the files written."),
) -> None:
    """Write long_term.jsonl, archive.jsonl and dream_log.jsonl, byte for byte as the file
    backend keeps them, and a server memory's open tasks as working/<id>.json (the way back
    from a server memory to files: then set `[store] backend = "files"`)."""
    from memctl.longterm.store import export_to, open_store

    settings = state(ctx).settings
    folder = (to or settings.layout.root).expanduser().absolute()
    store = open_store(settings.layout, settings)
    if not store.on_server and folder == settings.layout.root.absolute():
        raise UsageError(f"{folder} already keeps this memory in files; pass --to FOLDER to copy them")
    if not folder.is_dir():
        raise NotFound(f"{folder} is not a folder; create it first")
    written = export_to(store, folder)
    if store.on_server:
        from memctl.agent.tasks import export_tasks

        written += export_tasks(settings.layout, folder)
    if json_out:
        render.json_line({"files": written})
        return
    for path in written:
        render.line(path)


def import_files_cmd(
    ctx: typer.Context,
    folder: Path = typer.Argument(..., help="A file memory's root: its long_term.jsonl, archive.jsonl, dream_log.jsonl."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object: how many lines each part gained."),
) -> None:
    """Load a file memory's L5, L6 and dream log into this server memory, in one transaction,
    then its open tasks (working/*.json) the server lacks.
    Lines the server already holds are skipped, so running it again adds nothing; an L5 entry
    the server holds with other contents stops the load (nothing is loaded)."""
    from memctl.longterm.store import load_files, open_store

    settings = state(ctx).settings
    store = open_store(settings.layout, settings)
    if not store.on_server:
        raise UsageError('import-files loads into a server memory ([store] backend = "postgres"); '
                         "this memory keeps its own files")
    source = folder.expanduser().absolute()
    if not source.is_dir():
        raise NotFound(f"{source} is not a folder")
    added = load_files(store, source)
    from memctl.agent.tasks import import_tasks

    added["tasks"] = import_tasks(settings.layout, source)
    if json_out:
        render.json_line({"from": str(source), "added": added})
        return
    render.message(f"loaded {source} into {store.where}: " + ", ".join(f"{part} +{n}" for part, n in added.items()))


def retire_machine_cmd(
    ctx: typer.Context,
    machine: str = typer.Argument(..., help="The machine's key, `host:/root/` as `memctl status` lists it."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object."),
) -> None:
    """A machine of a team memory that is gone: no purge order waits for it any more (their
    strings are deleted from the server once every other machine has applied them)."""
    from memctl.longterm import purge_orders
    from memctl.longterm.pg_conn import translated
    from memctl.longterm.store import open_store

    settings = state(ctx).settings
    store = open_store(settings.layout, settings)
    if not store.on_server:
        raise UsageError("retire-machine is for a team memory ([store] backend = \"postgres\")")
    server = store.server
    with translated(server.where):
        known, spent = purge_orders.retire(server.conn, server.schema, machine)
    if not known:
        raise NotFound(f"{machine} is not a machine of {server.schema} (`memctl status` lists them)")
    if json_out:
        render.json_line({"retired": machine, "orders_spent": spent})
        return
    render.message(f"retired {machine}; {spent} purge orders now applied everywhere (their strings deleted)")
