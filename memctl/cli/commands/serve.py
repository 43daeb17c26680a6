"""The `memctl serve` commands (filled by the serve package)."""

import typer


def register(app: typer.Typer) -> None:
    return None
