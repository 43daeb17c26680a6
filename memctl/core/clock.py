"""The one place memctl asks for the current time.

`MEMCTL_NOW` (an ISO timestamp) fixes the clock for every command (design.md §11): tests,
simulations and schedule replays set it; nothing else changes.
"""

from __future__ import annotations

import os
from datetime import datetime

from memctl.core.errors import UsageError


def now() -> datetime:
    """Naive local time, like the timestamps in agents' raw logs."""
    fixed = os.environ.get("MEMCTL_NOW", "").strip()
    if not fixed:
        return datetime.now()
    try:
        value = datetime.fromisoformat(fixed)
    except ValueError:
        raise UsageError(f"MEMCTL_NOW={fixed!r} is not an ISO timestamp (e.g. 2026-04-05T09:00:00)") from None
    if value.tzinfo is not None:
        value = value.astimezone().replace(tzinfo=None)
    return value


def iso(value: datetime | None = None) -> str:
    return (value or now()).isoformat(timespec="seconds")
