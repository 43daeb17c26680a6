"""A date the query names: the candidates dated within it, and of the best others those whose
text names a date within it, are scaled by 1 + [ranking] date_weight.

Asked "What did Maria donate in December 2023?" or "我4月2日见了谁？", the items written
that month or day are the likelier answers: an item's date is when it was said, and in a
memory of conversations a thing is said on the day it happens or soon after (of the LoCoMo
questions naming a day, 38 of their 45 evidence turns were said that day; naming a month, 35
of 40 that month). An item may also name the date in its text — a birthday, an appointment
made days before ("公司年会定在4月3日") — and is lifted alike, or the messages merely said that day
would pass it. The words of the date stay query terms too.

Read: "13 October 2023", "October 13, 2023", "Oct 13th", "October 2023", "in/during/… June"
(a month alone only after a preposition: "May I …" names no date), "2023-10-13", "2023-10",
"2024年4月2日", "4月2日", "4月2号", "2024年4月", "4月份". A date without a year holds in
every year. Only the first date the query names counts. Without one, a date relative to now
(memctl.core.clock, so MEMCTL_NOW too): "today", "yesterday", "3 days ago", "this week" / "last
week" (Monday to Sunday), "this month" / "last month", "on Friday" / "last Friday", and 今天,
昨天, 前天, 3天前, 这周 / 本周, 上周 / 上个星期, 这个月 / 本月, 上个月, 周五 / 星期五, 上周五.
"""

from __future__ import annotations

import re
from collections import namedtuple

from memctl.recall.ranking import tuning
from memctl.recall.ranking.hits import scale_where_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from memctl.recall.ranking.hits import Hit
    from memctl.recall.ranking.ranking import Ranking
    from memctl.recall.indexing.store import SQLiteStore

_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
           "october", "november", "december")
_MONTH = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|" \
         r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_MONTH_WORDS = frozenset((*_MONTHS, *(m[:3] for m in _MONTHS), "sept"))  # a query without one (or a digit) names no date
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(\d{4})"
_PREPOSITION = r"(?:in|during|of|since|until|till|before|after|last|this|early|mid|late|by)"
# (pattern, the groups' meanings in order): y year, m month name, n month number, d day; compiled
# on the first query that may name a date (most searches never pay for it)
_SOURCES = (
    (rf"\b{_YEAR}-(\d{{2}})-(\d{{2}})\b", "ynd"),
    (rf"\b{_YEAR}-(\d{{2}})\b(?!-)", "yn"),
    (rf"\b{_MONTH}\.?\s+{_DAY},?\s+{_YEAR}\b", "mdy"),
    (rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}\.?,?\s+{_YEAR}\b", "dmy"),
    (rf"\b{_MONTH}\.?,?\s+{_YEAR}\b", "my"),
    (rf"\b{_MONTH}\.?\s+{_DAY}\b(?!\s*(?:,\s*)?\d)", "md"),
    (rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}\b", "dm"),
    (rf"\b{_PREPOSITION}[\s-]+{_MONTH}\b", "m"),
    (r"(?:(\d{4})\s*年\s*)?(\d{1,2})\s*月\s*(?:(\d{1,2})\s*[日号])?", "ynd"),
)
_compiled: list[tuple[re.Pattern, str]] = []


def _patterns() -> list[tuple[re.Pattern, str]]:
    if not _compiled:
        _compiled.extend((re.compile(pattern, re.IGNORECASE), fields) for pattern, fields in _SOURCES)
    return _compiled

# phrase -> (unit, how many back); the unit "day" counts days, "week" weeks, "month" months
_RELATIVE = {
    "today": ("day", 0), "yesterday": ("day", 1), "this week": ("week", 0), "last week": ("week", 1),
    "this month": ("month", 0), "last month": ("month", 1),
    "今天": ("day", 0), "昨天": ("day", 1), "前天": ("day", 2), "这周": ("week", 0), "本周": ("week", 0),
    "这个星期": ("week", 0), "上周": ("week", 1), "上星期": ("week", 1), "上个星期": ("week", 1),
    "上礼拜": ("week", 1), "这个月": ("month", 0), "本月": ("month", 0), "上个月": ("month", 1), "上月": ("month", 1),
}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAYS_ZH = "一二三四五六日天"  # 周日 and 周天 are both Sunday
_RELATIVE_SOURCE = (  # the weekdays first: 上周三 is a day, not the week 上周
    r"\b(?P<en_how>last|on|this past)\s+(?P<en_day>" + "|".join(_WEEKDAYS) + r")\b"
    r"|(?P<zh_last>上个?)?(?<![每下])(?:周|星期|礼拜)(?P<zh_day>[" + _WEEKDAYS_ZH + r"])"
    r"|\b(?P<ago>\d{1,3})\s+days?\s+ago\b|(?P<ago_zh>\d{1,3})\s*天前"
    r"|\b(?:" + "|".join(sorted((p for p in _RELATIVE if p.isascii()), key=len, reverse=True)) + r")\b"
    r"|" + "|".join(sorted((p for p in _RELATIVE if not p.isascii()), key=len, reverse=True)))
_RELATIVE_HINTS = ("today", "yesterday", "week", "month", "ago", "day", "天", "周", "星期", "礼拜", "月")


class Span(namedtuple("Span", "first last")):
    """The days from `first` to `last` ("2026-12-01"), as a date relative to now names them."""

    __slots__ = ()

    def holds(self, iso: str) -> bool:
        return self.first <= iso[:10] <= self.last


class Period(namedtuple("Period", "year month day")):
    """A day, a month, or a month of every year (year None), as the query names it."""

    __slots__ = ()

    def holds(self, iso: str) -> bool:
        """Whether an ISO date-time ("2023-10-13T14:02:00") falls within the period."""
        try:
            year, month, day = int(iso[0:4]), int(iso[5:7]), int(iso[8:10])
        except ValueError:
            return False
        return month == self.month and self.year in (None, year) and self.day in (None, day)

    def covers(self, named: Period) -> bool:
        """Whether a date a text names lies within the period; a text's date without a year may
        be any year's."""
        return named.month == self.month and self.day in (None, named.day) \
            and (self.year is None or named.year in (None, self.year))


def named_period(query: str) -> Period | Span | None:
    """The first date the query names; without one, the first date relative to now; or None."""
    return _named_date(query) or _relative_span(query)


def _relative_span(query: str) -> Span | None:
    lower = query.lower()
    if not any(hint in lower for hint in _RELATIVE_HINTS):
        return None
    match = re.search(_RELATIVE_SOURCE, lower)
    if match is None:
        return None
    from datetime import timedelta

    from memctl.core import clock

    today = clock.now().date()
    count = match["ago"] or match["ago_zh"]
    if match["en_day"] or match["zh_day"]:
        unit, back = "day", _days_back_to(match, today.weekday())
    else:
        unit, back = ("day", int(count)) if count else _RELATIVE[match.group(0)]
    if unit == "day":
        day = today - timedelta(days=back)
        return Span(day.isoformat(), day.isoformat())
    if unit == "week":
        monday = today - timedelta(days=today.weekday() + 7 * back)
        return Span(monday.isoformat(), (monday + timedelta(days=6)).isoformat())
    year, month = divmod(today.year * 12 + today.month - 1 - back, 12)
    return Span(f"{year:04d}-{month + 1:02d}-01", f"{year:04d}-{month + 1:02d}-31")


def _days_back_to(match: re.Match, weekday: int) -> int:
    """How many days ago the weekday the match names was: "on Friday" / 周五 the latest Friday up
    to today, "last Friday" the latest before today, 上周五 the Friday of the week before this."""
    if match["en_day"]:
        target = _WEEKDAYS.index(match["en_day"])
        if match["en_how"] == "on":
            return (weekday - target) % 7
        return (weekday - target - 1) % 7 + 1
    target = min(_WEEKDAYS_ZH.index(match["zh_day"]), 6)
    if match["zh_last"]:
        return weekday + 7 - target
    return (weekday - target) % 7


def _named_date(query: str) -> Period | None:
    if not any(ch.isdigit() for ch in query) and not _MONTH_WORDS.intersection(re.findall(r"[a-z]+", query.lower())):
        return None
    found = []
    for pattern, fields in _patterns():
        match = pattern.search(query)
        if match:
            period = _period(match, fields)
            if period is not None:  # the earliest date, the most specific where two start there
                start = match.start(1) if fields == "m" else match.start()  # not at the preposition
                found.append((start, start - match.end(), period))
    return min(found)[2] if found else None


def _period(match: re.Match, fields: str) -> Period | None:
    values = dict(zip(fields, match.groups()))
    if "m" in values:
        month = _MONTHS.index(next(m for m in _MONTHS if m.startswith(values["m"].lower()[:3]))) + 1
    else:
        month = int(values["n"])
    year = int(values["y"]) if values.get("y") else None
    day = int(values["d"]) if values.get("d") else None
    if not 1 <= month <= 12 or (day is not None and not 1 <= day <= 31) or (year is not None and year < 1000):
        return None
    return Period(year, month, day)


def mentions(text: str, period: Period) -> bool:
    """Whether the text names a date within the period (a day of it, or the month when the
    period is a month): "我上司的生日是6月8日" mentions 6月8日 and June; "in June" does not
    mention 8 June."""
    for pattern, fields in _patterns():
        for match in pattern.finditer(text):
            named = _period(match, fields)
            if named is not None and period.covers(named):
                return True
    return False


def favour_dated(store: SQLiteStore, candidates: list[Hit], period: Period | Span | None, ranking: Ranking) -> None:
    """The candidates dated within the period the query names, and of the best others those
    whose text names a date within it (a birthday, an appointment), scaled by 1 + date_weight
    (in place; the others keep their scores)."""
    weight = ranking.date_weight
    if period is None or weight <= 0:
        return
    undated = []
    for hit in candidates:
        if hit.date and period.holds(hit.date):
            hit.score *= 1.0 + weight
        else:
            undated.append(hit)
    if isinstance(period, Span) or not undated:
        return  # a date relative to now is the item's own: a text's "yesterday" is relative to it
    scale_where_text(store, undated, lambda text: mentions(text, period), 1.0 + weight, tuning.TYPED_ANSWERS_READ)
