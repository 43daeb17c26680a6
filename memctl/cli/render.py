"""How results reach the user: plain lines and JSON Lines on stdout, messages on stderr.

stdout carries data only; rich is used for terminal tables and for stderr, never for piped
data (it wraps at 80 columns and eats `[...]` as markup; conventions.md §5.2).
"""

from __future__ import annotations

import base64
import json
import os
import sys
from typing import Any, Iterable, Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def _no_color() -> bool:
    return bool(os.environ.get("NO_COLOR")) or os.environ.get("TERM") == "dumb"


def err_console() -> Console:
    return Console(stderr=True, no_color=_no_color(), highlight=False, soft_wrap=True)


def out_console() -> Console:
    return Console(no_color=_no_color(), highlight=False)


def line(text: str = "") -> None:
    """One line of data on stdout, surrogate-escaped bytes written back as they were."""
    data = (text + "\n").encode("utf-8", "surrogateescape")
    sys.stdout.buffer.write(data) if hasattr(sys.stdout, "buffer") else sys.stdout.write(text + "\n")


def raw_bytes(data: bytes) -> None:
    sys.stdout.flush()
    if hasattr(sys.stdout, "buffer"):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:  # test runners that capture text
        sys.stdout.write(data.decode("utf-8", "surrogateescape"))


def jsonable(value: Any) -> Any:
    """Make strings JSON-safe: text that holds undecodable bytes becomes {"bytes": base64}."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return {"bytes": base64.b64encode(value.encode("utf-8", "surrogateescape")).decode("ascii")}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def json_text(obj: Any) -> str:
    return json.dumps(jsonable(obj), ensure_ascii=False, default=str)


def json_line(obj: Any) -> None:
    line(json_text(obj))


def message(text: str) -> None:
    """A message for the person at the terminal (stderr)."""
    err_console().print(escape(text))


def warning(text: str) -> None:
    err_console().print(f"[yellow]warning:[/yellow] {escape(text)}")


def error(text: str) -> None:
    sys.stderr.write(f"memctl: error: {text}\n")


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A rich table on stdout; callers use it only when stdout is a terminal."""
    grid = Table(title=title, show_lines=False)
    for column in columns:
        grid.add_column(column)
    for row in rows:
        grid.add_row(*(escape(str(cell)) for cell in row))
    out_console().print(grid)


def human_bytes(count: int | float) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def escape_markup(text: str) -> str:
    return escape(text)
