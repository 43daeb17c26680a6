"""How results reach the user: plain lines and JSON Lines on stdout, messages on stderr.

stdout carries data only; rich is used for terminal tables and for stderr, never for piped
data (it wraps at 80 columns and eats `[...]` as markup; conventions.md §5.2).

Every printed text passes `redacted` — the one choke point of secret redaction on output
(memctl.core.redact plus `[redaction] extra_patterns`), whatever layer the text came from and
whether or not it was redacted when stored. The one exception is `raw_bytes(..., exact=True)`,
for `show --raw` of a session, whose contract is the original bytes. The lean search path
imports this module too, so it stays light: rich and json load only when used.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing costs ~7 ms; the lean search path imports this module
if TYPE_CHECKING:
    from typing import Any, Iterable, Sequence

    from rich.console import Console

_extra_patterns: tuple = ()


def configure_redaction(extra_patterns: Sequence[str]) -> None:
    """Add the user's `[redaction] extra_patterns` (validated by config) to the choke point."""
    global _extra_patterns
    _extra_patterns = tuple(extra_patterns)


def redacted(text: str) -> str:
    """`text` as it may be printed: every secret shape replaced by `[REDACTED:<kind>]`.

    Output redaction does not depend on `[redaction] enabled`, which governs what is stored:
    a secret kept at rest on purpose is still not echoed into a terminal or an agent's prompt."""
    from memctl.core.secret_gate import may_hold_secret

    if not _extra_patterns and not may_hold_secret(text):
        return text
    from memctl.core.redact import redact

    return redact(text, _extra_patterns)


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def _no_color() -> bool:
    return bool(os.environ.get("NO_COLOR")) or os.environ.get("TERM") == "dumb"


def err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, no_color=_no_color(), highlight=False, soft_wrap=True)


def out_console() -> Console:
    from rich.console import Console

    return Console(no_color=_no_color(), highlight=False)


def shown(text: str) -> str:
    """`text` redacted, and on a terminal its control characters (but newline and tab) as `?`:
    a stored escape sequence (a web page's, in an agent's session) must not retitle, clear or
    rewrite the user's terminal. Piped, the data stays as it is."""
    text = redacted(text)
    if text.isprintable() or not stdout_is_terminal():
        return text
    return "".join(c if c.isprintable() or c in "\n\t" else "?" for c in text)


def line(text: str = "") -> None:
    """One line of data on stdout, surrogate-escaped bytes written back as they were."""
    text = shown(text)
    data = (text + "\n").encode("utf-8", "surrogateescape")
    sys.stdout.buffer.write(data) if hasattr(sys.stdout, "buffer") else sys.stdout.write(text + "\n")


def lines(texts: Iterable[str]) -> None:
    """Many lines of data at once (the search path's hits)."""
    data = "".join(shown(text) + "\n" for text in texts).encode("utf-8", "surrogateescape")
    sys.stdout.buffer.write(data) if hasattr(sys.stdout, "buffer") else sys.stdout.write(data.decode("utf-8", "surrogateescape"))


def raw_bytes(data: bytes, exact: bool = False) -> None:
    """Bytes on stdout: redacted as text, unless `exact` (show --raw's byte-exact contract)."""
    if not exact:
        data = shown(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
    sys.stdout.flush()
    if hasattr(sys.stdout, "buffer"):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:  # test runners that capture text
        sys.stdout.write(data.decode("utf-8", "surrogateescape"))


def jsonable(value: Any) -> Any:
    """Make strings JSON-safe and redacted: text that holds undecodable bytes becomes
    {"bytes": base64} (of the redacted text)."""
    if isinstance(value, str):
        value = redacted(value)
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            import base64

            return {"bytes": base64.b64encode(value.encode("utf-8", "surrogateescape")).decode("ascii")}
    if isinstance(value, dict):
        return {redacted(str(k)): jsonable(v) for k, v in value.items()}  # a key may be a query's word
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def json_text(obj: Any) -> str:
    import json

    return json.dumps(jsonable(obj), ensure_ascii=False, default=str)


def json_line(obj: Any) -> None:
    line(json_text(obj))


def message(text: str) -> None:
    """A message for the person at the terminal (stderr)."""
    err_console().print(escape(redacted(text)))


def warning(text: str) -> None:
    err_console().print(f"[yellow]warning:[/yellow] {escape(redacted(text))}")


def error(text: str) -> None:
    sys.stderr.write(f"memctl: error: {redacted(text)}\n")


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A rich table on stdout; callers use it only when stdout is a terminal."""
    from rich.table import Table

    grid = Table(title=title, show_lines=False)
    for column in columns:
        grid.add_column(column)
    for row in rows:
        grid.add_row(*(escape(redacted(str(cell))) for cell in row))
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
