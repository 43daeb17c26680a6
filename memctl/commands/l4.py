"""L4 subcommands: compress, archive, show, demo."""

import typer


def register(app: typer.Typer) -> None:
    return None
