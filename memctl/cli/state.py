"""The state one invocation of the command line carries: the --root and --debug options, and
the settings and writer lock derived from them. Its own module so that the app (which registers
the commands) and the commands (which read the state) both import it and not each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import typer

from memctl.core.config import Settings, load_settings
from memctl.core.roots import resolve_root
from memctl.core.fsutil import WriterLock


@dataclass
class AppState:
    root_option: Optional[str] = None
    debug: bool = False
    _settings: Optional[Settings] = field(default=None, repr=False)

    @property
    def root(self) -> Path:
        """The memory root; an error naming the folder when it is not one (see resolve_root)."""
        return resolve_root(self.root_option)

    @property
    def root_to_create(self) -> Path:
        """The root `init` (and `schedule install`) may create: resolved, but not required."""
        return resolve_root(self.root_option, for_init=True)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(self.root)
            from memctl.cli import render

            render.configure_redaction(self._settings.get("redaction", "extra_patterns"))
        return self._settings

    def writer_lock(self, wait: float = 0.0) -> WriterLock:
        return WriterLock(self.settings.layout.lock, wait_seconds=wait)


def state(ctx: typer.Context) -> AppState:
    obj = ctx.find_root().obj
    if not isinstance(obj, AppState):
        obj = AppState()
        ctx.find_root().obj = obj
    return obj


def apply_team_purges(settings: Settings) -> None:
    """On a team memory: purges made on other machines applied to this machine's files first,
    before a command shows what they hold (memctl.longterm.purge_orders)."""
    from memctl.cli import render
    from memctl.longterm.purge_orders import settle_here

    for line in settle_here(settings):
        render.warning(line)


def read_stdin(limit: int, usage: str) -> bytes:
    """This invocation's stdin, at most `limit` bytes (a longer input is refused, not cut), or
    `usage` as the error when stdin is a terminal."""
    import sys

    from memctl.core.errors import UsageError

    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError(usage)
    stream = sys.stdin.buffer if hasattr(sys.stdin, "buffer") else None
    data = stream.read(limit + 1) if stream is not None else sys.stdin.read(limit + 1).encode("utf-8", "surrogateescape")
    if len(data) > limit:
        raise UsageError(f"stdin holds more than {limit} bytes; send less")
    return data
