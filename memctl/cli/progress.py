"""One updating progress line on stderr for the long runs (`archive`, `import`), drawn
without rich so the lean paths can use it too.

On a terminal (stderr a tty) the line is redrawn in place with `\\r` — what, done/total, the
rate and the current item — at most ten times a second, and erased when the run ends, so the
run's report follows on a clean line. Anywhere else (a pipe, a log, a timer's journal) nothing
is drawn. With `verbose`, each item's own line is printed as well, terminal or not (the
lines a run used to scroll).
"""

from __future__ import annotations

import sys
import time

REDRAW_SECONDS = 0.1


def printable_text(text: str) -> str:
    from memctl.cli.table import printable

    return printable(text)


def stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except ValueError:  # closed
        return False


class ProgressLine:
    def __init__(self, what: str, unit: str, verbose: bool = False, stream=None, terminal: bool | None = None) -> None:
        self.what, self.unit, self.verbose = what, unit, verbose
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = stderr_is_terminal() if terminal is None else terminal
        self.started = time.monotonic()
        self._drawn_at = 0.0
        self._shown = False

    def update(self, done: int, total: int | None, item: str = "", unit: str | None = None) -> None:
        """`done` of `total` (None: not known) units (`unit`: another name for them from now
        on), working on `item`. With verbose, the item's line (or the count's, without one)."""
        now = time.monotonic()
        if unit is not None and unit != self.unit:  # another step: its own rate
            self.unit, self.started = unit, now
        if self.verbose and (item or done):
            from memctl.cli.render import redacted

            self._erase()
            self.stream.write(redacted(printable_text(item or self.text(done, total, now - self.started))) + "\n")
        if not self.terminal:
            return
        if self._shown and now - self._drawn_at < REDRAW_SECONDS and done != total:
            return
        self._drawn_at = now
        self._draw(self.text(done, total, now - self.started, item))

    def text(self, done: int, total: int | None, seconds: float, item: str = "") -> str:
        count = f"{done}/{total}" if total is not None else f"{done}"
        per_second = done / seconds if seconds > 0 else 0
        rate = f", {per_second:.0f}/s" if per_second >= 100 else f", {per_second:.1f}/s" if per_second else ""
        return f"{self.what}: {count} {self.unit}{rate}" + (f"  {item}" if item else "")

    def hear(self, done: int, total: int | None, item: str = "") -> None:
        """`update` as a plain callback of (done, total, item), for the modules' progress hooks."""
        self.update(done, total, item)

    def close(self) -> None:
        self._erase()
        self.stream.flush()

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _draw(self, text: str) -> None:
        from memctl.cli.render import redacted
        from memctl.cli.table import cut, terminal_width

        try:
            width = terminal_width(self.stream.fileno())
        except (AttributeError, ValueError, OSError):
            width = 80
        self.stream.write("\r" + cut(redacted(printable_text(text)), max(width - 1, 10)) + "\x1b[K")
        self.stream.flush()
        self._shown = True

    def _erase(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[K")
            self._shown = False


def rebuild_progress(verbose: bool = False) -> ProgressLine:
    """`index rebuild`'s line (the lean path's and the full command line's): sources indexed;
    its `hear` is what SearchIndex.rebuild takes as `progress`."""
    return ProgressLine("index rebuild", "sources", verbose=verbose)
