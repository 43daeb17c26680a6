"""The `memctl learn` commands (filled by the learn package)."""

import typer


def register(app: typer.Typer) -> None:
    return None
