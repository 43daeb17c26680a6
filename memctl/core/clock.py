"""The one place memctl asks for the current time.

`MEMCTL_NOW` (an ISO timestamp) fixes the clock for every command (design.md §11): tests,
simulations and schedule replays set it; nothing else changes.
"""

from __future__ import annotations

import os

from memctl.core.errors import ConfigError, UsageError

TYPE_CHECKING = False  # datetime loads only when a command needs one (~2M instructions)
if TYPE_CHECKING:
    from datetime import datetime

_DIGITS = "0123456789"
_STAMP_SHAPE = "dddd-dd-ddTdd:dd:dd"


def now() -> datetime:
    """Naive local time, like the timestamps in agents' raw logs."""
    from datetime import datetime

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


def timestamp() -> float:
    """`now()` in seconds since the epoch; without MEMCTL_NOW, `time.time()` (datetime not loaded)."""
    if not os.environ.get("MEMCTL_NOW", "").strip():
        import time

        return time.time()
    return now().timestamp()


def iso(value: datetime | str | None = None) -> str:
    """The ISO stamp (seconds) of `value`, of now when None; a str is a stamp already (`stamp()`)."""
    if isinstance(value, str):
        return value
    return (value or now()).isoformat(timespec="seconds")


def stamp() -> str:
    """`iso(now())` without importing datetime when MEMCTL_NOW is unset or already a plain
    naive `YYYY-MM-DDTHH:MM:SS` (the common cases: the same text either way)."""
    fixed = os.environ.get("MEMCTL_NOW", "").strip()
    if not fixed:
        import time

        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
    if _plain_stamp(fixed):
        return fixed
    return iso(now())


def _plain_stamp(text: str) -> bool:
    """Whether `text` is a valid naive timestamp that isoformat(timespec="seconds") gives back."""
    if len(text) != len(_STAMP_SHAPE):
        return False
    for char, shape in zip(text, _STAMP_SHAPE):
        if (char not in _DIGITS) if shape == "d" else (char != shape):
            return False
    year, month, day = int(text[0:4]), int(text[5:7]), int(text[8:10])
    if year < 1 or not 1 <= month <= 12 or not 1 <= day <= _days_in(year, month):
        return False
    return int(text[11:13]) < 24 and int(text[14:16]) < 60 and int(text[17:19]) < 60


def _days_in(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


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
