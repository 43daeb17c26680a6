"""Why no resident searcher is started: the record a searcher that could not get ready leaves.

A searcher that fails its warm-up (a broken or missing model, a store it cannot read) exits
without serving, and without this every later fused search would start another one that loads
numpy, fails the same way and exits. So the failing searcher writes `.memctl/semantic.unready`
(atomically): its identity (memctl.recall.embeddings.semantic_helper.identity), the `[semantic] model` it
tried, the stamps of what it depended on (the model directory, the packages folder an install
changes, the vector store's files), when, and the one-line reason. A search that found no
searcher starts none while that record matches it: the same identity and model, every stamp
unchanged, and less than BACKOFF_SECONDS since (the clock is memctl.core.clock's: MEMCTL_NOW
moves it). A searcher that gets ready removes the record.

The record is derived like everything under `.memctl/`: one that is not a plain file (a symlink,
a FIFO), is larger than MAX_RECORD_BYTES, or does not parse into the expected fields is treated
as absent (a searcher is started, as without it), never followed; a record from the future is
too. Reading it only stats the paths it names.
"""

from __future__ import annotations

import math
import os

RECORD_NAME = "semantic.unready"
BACKOFF_SECONDS = 600.0  # a search retries a failed searcher after this long even if nothing it stamped changed
MAX_RECORD_BYTES = 65_536
MAX_DEPENDS = 8  # paths stamped in one record
MAX_ENTRIES = 32  # a folder with more is stamped by its own stat alone (a model directory holds a handful)
MAX_REASON = 300


class NotReady:
    """A searcher's failed warm-up as recorded: identity, model option, (path, stamp) pairs,
    when (seconds since the epoch), the reason."""

    def __init__(self, identity: str, model: str, depends: list[tuple[str, str]], at: float, reason: str):
        self.identity, self.model, self.depends, self.at, self.reason = identity, model, depends, at, reason


def model_option(ranking) -> str:
    """`[semantic] model` as the record keeps it (memctl.recall.ranking.ranking.Ranking)."""
    return str(ranking.semantic_option("model") or "")


def record_path(root: str) -> str:
    return os.path.join(root, ".memctl", RECORD_NAME)


def stamps(paths: list[str]) -> list[tuple[str, str]]:
    """(path, stamp) of what a warm-up depends on, taken before it (a fix made while it fails
    is then a change the record does not hide)."""
    return [(path, stamp(path)) for path in paths[:MAX_DEPENDS]]


def record(root: str, identity: str, model: str, depends: list[tuple[str, str]], reason: str) -> None:
    """Write the record of a failed warm-up (by the failing searcher). Raises OSError or
    MemctlError when it cannot be written (the searches then keep starting searchers)."""
    from memctl.core.errors import UnsafePath
    from memctl.core.fsutil import atomic_write_text
    from memctl.core.jsoncodec import dumps

    if not _real_state_dir(root):
        raise UnsafePath(f"{os.path.join(root, '.memctl')} is not a real folder")
    body = {"identity": identity, "model": model, "depends": [list(pair) for pair in depends[:MAX_DEPENDS]],
            "at": now(), "reason": " ".join(reason.split())[:MAX_REASON]}
    clear(root)  # whatever is at the name (a planted symlink) is replaced, never written through
    atomic_write_text(record_path(root), dumps(body, ascii=True) + "\n")  # ascii: a root's undecodable bytes survive


def clear(root: str) -> None:
    """Remove the record (a searcher got ready). unlink never follows a symlink; a folder at the
    name is left alone (it is then ignored as a record)."""
    if not _real_state_dir(root):
        return
    try:
        os.unlink(record_path(root))
    except OSError:
        pass


def read(root: str) -> NotReady | None:
    """The record, or None when there is none or it is not a well-formed one."""
    import stat

    from memctl.core.errors import MemctlError
    from memctl.core.fsutil import open_nofollow

    if not _real_state_dir(root):
        return None
    try:  # O_NONBLOCK: a FIFO planted at the name must not hang the search
        fd = open_nofollow(record_path(root), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, MemctlError):  # absent, or a symlink (UnsafePath)
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = b""
        while len(data) <= MAX_RECORD_BYTES:
            part = os.read(fd, MAX_RECORD_BYTES + 1 - len(data))
            if not part:
                return _parsed(data)
            data += part
        return None  # too large to be one of ours
    except OSError:
        return None
    finally:
        os.close(fd)


def _real_state_dir(root: str) -> bool:
    """`.memctl/` a folder, not a symlink to one (as memctl.residents.local_socket requires)."""
    import stat

    try:
        return stat.S_ISDIR(os.lstat(os.path.join(root, ".memctl")).st_mode)
    except OSError:
        return False


def _parsed(data: bytes) -> NotReady | None:
    from memctl.core.jsoncodec import loads

    try:
        body = loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(body, dict):
        return None
    identity, model, depends, at, reason = (body.get(key) for key in ("identity", "model", "depends", "at", "reason"))
    if not (isinstance(identity, str) and isinstance(model, str) and isinstance(reason, str)
            and isinstance(at, (int, float)) and not isinstance(at, bool) and math.isfinite(at)
            and isinstance(depends, list) and len(depends) <= MAX_DEPENDS):
        return None
    pairs = []
    for pair in depends:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(part, str) for part in pair)):
            return None
        pairs.append((pair[0], pair[1]))
    return NotReady(identity, model, pairs, float(at), reason)


def holds_back(root: str, identity: str, model: str, at: float | None = None,
               backoff: float = BACKOFF_SECONDS) -> NotReady | None:
    """The record that says a searcher for this identity and `[semantic] model` failed less than
    `backoff` seconds before `at` (now when None) with nothing it depended on changed since; None
    when a searcher may be started."""
    found = read(root)
    if found is None or found.identity != identity or found.model != model:
        return None
    elapsed = (now() if at is None else at) - found.at
    if not 0 <= elapsed < backoff:
        return None
    if any(stamp(path) != was for path, was in found.depends):
        return None
    return found


def stamp(path: str) -> str:
    """A file's or folder's version as stat sees it ('-' when absent); a folder of at most
    MAX_ENTRIES entries (a model directory) with its entries' (a model file replaced in place
    leaves the folder's own stat alone; a packages folder's changes by an install)."""
    from memctl.residents.local_socket import stamp as file_stamp

    own = file_stamp(path)
    if not os.path.isdir(path):
        return own
    try:
        with os.scandir(path) as listing:
            entries = []
            for entry in listing:
                if len(entries) == MAX_ENTRIES:
                    return own
                entries.append(entry)
    except OSError:
        return own
    return "|".join([own, *sorted(f"{entry.name}={file_stamp(entry.path)}" for entry in entries)])


def now() -> float:
    """Seconds since the epoch by memctl's clock (MEMCTL_NOW moves it); a malformed MEMCTL_NOW is
    the real clock here (the command that reads it says so)."""
    from memctl.core import clock
    from memctl.core.errors import MemctlError

    try:
        return clock.timestamp()
    except MemctlError:
        import time

        return time.time()
