"""The search results table on a terminal, drawn without rich (issue #13: a terminal search
must not pay rich's ~0.2 s import), so the lean path and the full command line print the same.

One line a hit: rank, score, layer, date, ref (never cut: it is what `show` takes) and the
snippet, which gives way first — cut with `…` to the terminal's width around the first of the
query's words it holds (at 80 columns the snippet has ~25 cells, and the search's window puts
that word ~50 characters in), or with `wide` folded onto the next lines under its column. Widths are counted in terminal cells (a Chinese
character takes two). Control characters in a snippet are shown as `?`, never sent to the
terminal. Colour (bold header, the query's words bold yellow) unless NO_COLOR or TERM=dumb.
"""

from __future__ import annotations

import os
import unicodedata

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Sequence

GAP = "  "
BOLD, HIGHLIGHT, RESET = "\x1b[1m", "\x1b[1;33m", "\x1b[0m"
HEADERS = ("#", "score", "layer", "date", "ref", "snippet")


def terminal_width(stream_fd: int = 1) -> int:
    if os.environ.get("COLUMNS", "").isdigit():
        return max(int(os.environ["COLUMNS"]), 20)
    try:
        return max(os.get_terminal_size(stream_fd).columns, 20)
    except OSError:
        return 80


def use_colour() -> bool:
    return not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def cells(text: str) -> int:
    """How many terminal columns `text` takes."""
    if text.isascii():
        return len(text)
    return sum(_char_cells(c) for c in text)


def _char_cells(char: str) -> int:
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in "WF" else 1


def printable(text: str) -> str:
    return text if text.isprintable() else "".join(c if c.isprintable() else "?" for c in text)


def cut(text: str, room: int) -> str:
    """`text` within `room` cells, ending in `…` when it had to be cut."""
    if cells(text) <= room:
        return text
    out, used = [], 0
    for char in text:
        width = _char_cells(char)
        if used + width > room - 1:
            break
        out.append(char)
        used += width
    return "".join(out) + "…"


def cut_around(text: str, words: Sequence[str], room: int) -> str:
    """`text` within `room` cells, showing the first place one of the query's `words` appears:
    cut at its end, as `cut` does, when that place is in view there; otherwise from a little
    before it (a quarter of the room, from a word's start where one is near), `…` at each cut."""
    if cells(text) <= room:
        return text
    found = first_match(text, words)
    if found is None or cells(text[:found[1]]) <= room - 1:
        return cut(text, room)
    start, before = found[0], 0
    while start > 0 and before + _char_cells(text[start - 1]) <= room // 4:
        start -= 1
        before += _char_cells(text[start])
    space = text.find(" ", start, found[0])
    if start and space >= 0:
        start = space + 1
    while start > 0 and cells(text[start - 1:]) <= room - 1:  # near the end: fill the room from the left
        start -= 1
    return "…" + cut(text[start:], room - 1) if start else cut(text, room)


def first_match(text: str, words: Sequence[str]) -> tuple[int, int] | None:
    """(start, end) of the earliest case-insensitive occurrence of any of `words`."""
    lowered = text.lower()
    if len(lowered) != len(text):  # lower() changed lengths: positions would drift
        lowered = text
    found = [(at, at + len(word)) for word in words if word and (at := lowered.find(word.lower())) >= 0]
    return min(found) if found else None


def fold(text: str, room: int) -> list[str]:
    """`text` as lines of at most `room` cells."""
    lines, current, used = [], [], 0
    for char in text:
        width = _char_cells(char)
        if used + width > room and current:
            lines.append("".join(current))
            current, used = [], 0
        current.append(char)
        used += width
    return lines + ["".join(current)] if current or not lines else lines


def hits_table(rows: Sequence[tuple[str, str, str, str, str, str]], words: Sequence[str], width: int,
               wide: bool = False, colour: bool = False) -> list[str]:
    """The table's lines for rows of (rank, score, layer, date, ref, snippet), already redacted."""
    widths = [max(cells(h), *(cells(r[i]) for r in rows)) for i, h in enumerate(HEADERS[:5])]
    fixed = sum(widths) + len(GAP) * 5
    room = max(width - fixed - 1, 1)  # the ref is never cut: the snippet gives way, down to `…`
    lines = [_line([h.ljust(w) for h, w in zip(HEADERS[:5], widths)], "snippet", BOLD if colour else "", colour)]
    for row in rows:
        first = [row[0].rjust(widths[0])] + [_pad(value, w) for value, w in zip(row[1:5], widths[1:])]
        snippet = printable(row[5])
        parts = fold(snippet, room) if wide else [cut_around(snippet, words, room)]
        lines.append(_line(first, _highlight(parts[0], words, colour), "", colour))
        lines += [" " * fixed + _highlight(part, words, colour) for part in parts[1:]]
    return lines


def _pad(text: str, width: int) -> str:
    return text + " " * (width - cells(text))


def _line(cells_: list[str], last: str, style: str, colour: bool) -> str:
    text = GAP.join(cells_ + [last]).rstrip()
    return f"{style}{text}{RESET}" if style and colour else text


def _highlight(text: str, words: Sequence[str], colour: bool) -> str:
    """The query's words in bold yellow (case-insensitive), where they are whole in `text`."""
    lowered = text.lower()
    if not colour or not words or len(lowered) != len(text):  # lower() changed lengths: spans would drift
        return text
    marks = [False] * len(text)
    for word in words:
        needle = word.lower()
        start = lowered.find(needle)
        while needle and start >= 0:
            for k in range(start, min(start + len(needle), len(text))):
                marks[k] = True
            start = lowered.find(needle, start + len(needle))
    if not any(marks):
        return text
    out, inside = [], False
    for char, marked in zip(text, marks):
        if marked != inside:
            out.append(HIGHLIGHT if marked else RESET)
            inside = marked
        out.append(char)
    return "".join(out) + (RESET if inside else "")


def table_lines(hits, query: str, wide: bool = False) -> list[str]:
    """The lines of the table for search hits (the lean path and `memctl search` share it)."""
    from memctl.cli.render import redacted
    from memctl.cli.tsv import readable_snippet

    rows = [(str(rank), f"{hit.score:.3f}", redacted(hit.layer), hit.date[:10], redacted(hit.ref),
             redacted(readable_snippet(hit.snippet))) for rank, hit in enumerate(hits, start=1)]
    words = [w for w in query.replace(",", " ").split() if len(w) > 1]
    return hits_table(rows, words, terminal_width(), wide, use_colour())
