"""Fault injection for crash-safety tests; both hooks cost one environment lookup when unset.

`MEMCTL_FAULT_AFTER=N` kills the process with SIGKILL at the N-th file-operation checkpoint
of a run (no cleanup, no atexit), so a test can prove that every intermediate state on disk
is recoverable.

`MEMCTL_FAULT_AT=LABEL` kills it so at the first checkpoint of that label instead (the resident
writer's steps: a long-lived process counts checkpoints of many runs).

`MEMCTL_FAULT_WRITE=N:KIND` acts on the N-th data write of a run that goes through `write`
(the JSON Lines append primitive and the atomic-write helper): `torn` writes half of the
buffer and then SIGKILLs the process, `enospc` and `eio` raise that OSError instead, as a
full or failing disk would.

`MEMCTL_FAULT_SYNC=eio` (or `enospc`) makes the fsync of a write's last append, deferred
until the writer lock is released (group commit, `fsutil.sync_pending`), fail so.

`MEMCTL_FAULT_DERIVED=enospc` makes every write of derived state that goes through
`derived_write` (the write lookups) fail as a full disk would; `derived_write` is also a
`checkpoint`, so `MEMCTL_FAULT_AFTER` can kill a run just before one.
"""

from __future__ import annotations

import errno
import os

_count = 0
_writes = 0
_ERRORS = {"enospc": errno.ENOSPC, "eio": errno.EIO}


def checkpoint(label: str) -> None:
    global _count
    if os.environ.get("MEMCTL_FAULT_AT") == label:
        _kill()
    limit = os.environ.get("MEMCTL_FAULT_AFTER")
    if not limit:
        return
    _count += 1
    if _count >= int(limit):
        _kill()


def write(fd: int, data: bytes | memoryview) -> int:
    """`os.write`, unless MEMCTL_FAULT_WRITE says this is the write that fails."""
    spec = os.environ.get("MEMCTL_FAULT_WRITE")
    if spec:
        _maybe_fail(fd, data, spec)
    return os.write(fd, data)


def _maybe_fail(fd: int, data: bytes | memoryview, spec: str) -> None:
    global _writes
    _writes += 1
    number, _, kind = spec.partition(":")
    if _writes != int(number):
        return
    if kind in _ERRORS:
        code = _ERRORS[kind]
        raise OSError(code, os.strerror(code))
    os.write(fd, data[: len(data) // 2])
    os.fsync(fd)
    _kill()


def sync(fd: int) -> None:
    """`os.fsync`, unless MEMCTL_FAULT_SYNC names the error it fails with."""
    kind = os.environ.get("MEMCTL_FAULT_SYNC")
    if kind in _ERRORS:
        code = _ERRORS[kind]
        raise OSError(code, os.strerror(code))
    os.fsync(fd)


def _kill() -> None:
    import signal  # here: only a fault test gets this far

    os.kill(os.getpid(), signal.SIGKILL)


def derived_write(label: str) -> None:
    """Before a write of derived state: a checkpoint, and the failure MEMCTL_FAULT_DERIVED asks for."""
    checkpoint(label)
    kind = os.environ.get("MEMCTL_FAULT_DERIVED")
    if kind in _ERRORS:
        code = _ERRORS[kind]
        raise OSError(code, os.strerror(code))
