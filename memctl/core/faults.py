"""Fault injection for crash-safety tests: `MEMCTL_FAULT_AFTER=N` kills the process with
SIGKILL at the N-th file-operation checkpoint of a run (no cleanup, no atexit), so a test
can prove that every intermediate state on disk is recoverable."""

from __future__ import annotations

import os
import signal

_count = 0


def checkpoint(label: str) -> None:
    global _count
    limit = os.environ.get("MEMCTL_FAULT_AFTER")
    if not limit:
        return
    _count += 1
    if _count >= int(limit):
        os.kill(os.getpid(), signal.SIGKILL)
