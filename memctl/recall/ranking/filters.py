"""The date and type filters: what `--since`, `--until` and `--type` keep.

Every stage that brings in an item (candidates, session feedback, neighbouring turns) applies
them, so an item outside the filters never lends or receives a score."""

from __future__ import annotations

import re
from collections import namedtuple
from datetime import datetime, timedelta

from memctl.core import clock
from memctl.core.errors import UsageError

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from memctl.recall.ranking.hits import Hit


class Filters(namedtuple("Filters", "layers since until type")):
    """layers: the layers searched; since/until: ISO bounds (parse_when) or None; type: or None."""

    __slots__ = ()

    def passes(self, hit: Hit) -> bool:
        """Whether the hit's type and date are within the filters (its layer is not checked:
        the candidates' match expression already holds only the wanted layers)."""
        if self.type and hit.type != self.type:
            return False
        if self.since and (not hit.date or hit.date < self.since):
            return False
        if self.until and (not hit.date or hit.date > self.until):
            return False
        return True

    def admits(self, hit: Hit) -> bool:
        """passes, and in one of the layers searched: for items brought in beside the matches."""
        return hit.layer in self.layers and self.passes(hit)


def parse_when(text: str | None, end_of_day: bool = False) -> str | None:
    """ISO dates, or python-dateutil phrases, or `3 days ago` / `last week` / `yesterday`."""
    if not text:
        return None
    raw = text.strip()
    now = clock.now()
    relative = _relative_date(raw.lower(), now)
    if relative is not None:
        return relative.isoformat(timespec="seconds")
    try:
        value = datetime.fromisoformat(raw)
        date_only = len(raw) <= 10
    except ValueError:
        from dateutil import parser as date_parser

        try:
            value = date_parser.parse(raw, default=now.replace(hour=0, minute=0, second=0, microsecond=0))
        except (ValueError, OverflowError):
            raise UsageError(f"cannot read the date {text!r}: use ISO (2026-04-05) or e.g. '3 days ago'") from None
        date_only = value.hour == value.minute == value.second == 0
    if value.tzinfo is not None:
        value = value.astimezone().replace(tzinfo=None)
    if end_of_day and date_only:
        value = value.replace(hour=23, minute=59, second=59)
    return value.isoformat(timespec="seconds")


_AGO = re.compile(r"^(\d+)\s*(minute|hour|day|week|month|year)s?\s+ago$")


def _relative_date(raw: str, now: datetime) -> datetime | None:
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    named = {"today": midnight, "yesterday": midnight - timedelta(days=1), "now": now,
             "last week": midnight - timedelta(days=7), "last month": midnight - timedelta(days=30),
             "last year": midnight - timedelta(days=365)}
    if raw in named:
        return named[raw]
    match = _AGO.match(raw)
    if not match:
        return None
    from dateutil.relativedelta import relativedelta

    count, unit = int(match.group(1)), match.group(2)
    try:
        return now - relativedelta(**{f"{unit}s": count})
    except (OverflowError, ValueError):  # before year 1: no date that far back exists
        raise UsageError(f"the date {raw!r} is out of range: dates run from year 1 to 9999") from None
