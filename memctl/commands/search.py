"""Subcommands of this group are added by their issue's work."""

import typer


def register(app: typer.Typer) -> None:
    return None
