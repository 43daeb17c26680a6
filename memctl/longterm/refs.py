"""The reference log `.memctl/refs.log`: search's lock-free note that an L5 entry was used.

One line per hit, `<ISO time>\t<entry id>\n`, appended with a single `O_APPEND` write; extra
tab-separated fields after the id are allowed and ignored. The dream pass folds new lines into
the entries (see memctl.longterm.entries and memctl.longterm.dream). Kept apart from memctl.longterm.entries so that a
search, which only appends, does not import the entry store.
"""

from __future__ import annotations

from pathlib import Path

from memctl.core.errors import MemctlError
from memctl.core.jsonl import append_unlocked

TYPE_CHECKING = False  # typing costs ~7 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Iterable

REFS_FIELD_SEP = "\t"


def record_refs(refs_log: Path, ids: Iterable[str], when: str) -> None:
    """Append one `<when>\t<id>` line per id in a single O_APPEND write (lock-free, no fsync:
    a lost reference only delays forgetting); after a torn tail it starts on a fresh line."""
    payload = "".join(f"{when}{REFS_FIELD_SEP}{i}\n" for i in ids if i and "\t" not in i and "\n" not in i)
    if not payload:
        return
    Path(refs_log).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    append_unlocked(Path(refs_log), payload.encode("utf-8"))


def record_used(layout, ids: list[str], when: str, on_server=None) -> None:
    """The references of a search or compose: `on_server(ids, when)` records them on a server
    memory, else they go to the root's refs.log. Never an error: a reference count is a hint,
    and a read-only memory or a server that refused it must still answer."""
    if not ids:
        return
    if on_server is not None:
        try:
            on_server(ids, when)
        except MemctlError:
            pass
    elif layout.state_writable():
        try:
            record_refs(layout.refs_log, ids, when)
        except OSError:
            pass


def read_refs(refs_log: Path, offset: int = 0) -> tuple[list[tuple[str, str]], list[tuple[str, str]], int]:
    """From one read of the log: every (time, id) pair, the pairs from byte `offset` on, and the
    offset after the last complete line. A log shorter than `offset` was replaced, so all of it
    is new."""
    try:
        data = Path(refs_log).read_bytes()
    except FileNotFoundError:
        return [], [], 0
    if offset > len(data):
        offset = 0
    end = data.rfind(b"\n") + 1
    if offset >= end:
        return _pairs(data[:end]), [], offset
    fresh = _pairs(data[offset:end])
    if offset and data[offset - 1:offset] != b"\n":  # a cursor inside a line: a replaced log
        return _pairs(data[:end]), fresh, end
    return _pairs(data[:offset]) + fresh, fresh, end


def _pairs(data: bytes) -> list[tuple[str, str]]:
    pairs = []
    for raw in data.decode("utf-8", "replace").splitlines():
        parts = raw.split(REFS_FIELD_SEP)
        if len(parts) >= 2 and parts[0] and parts[1]:
            pairs.append((parts[0].strip(), parts[1].strip()))
    return pairs
