"""The one place memctl asks for the current time.

`MEMCTL_NOW` (an ISO timestamp) fixes the clock for every command (design.md §11): tests,
simulations and schedule replays set it; nothing else changes.
"""

from __future__ import annotations

import os
from datetime import datetime

from memctl.core.errors import ConfigError, UsageError


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


def parse_duration(text: str | int | float) -> float:
    """'2h', '30m', '90s', '3d', or a number of seconds -> seconds."""
    if isinstance(text, (int, float)):
        return float(text)
    raw = str(text).strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    try:
        if raw and raw[-1] in units:
            return float(raw[:-1]) * units[raw[-1]]
        return float(raw)
    except (ValueError, OverflowError):
        raise ConfigError(f"bad duration {text!r}: use a number with s, m, h, d or w (e.g. 2h)") from None
