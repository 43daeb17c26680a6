"""Dates relative to a message made absolute: "yesterday" said on 8 May 2023 is 7 May 2023.

A memory read months later cannot know when "yesterday" was, so the extractor writes the day
the message means. The day a message was said comes from its `time`: ISO 8601 as the write
link buffers it ("2023-05-08T13:56:00"), or the dates the recall side already reads
("1:56 pm on 8 May, 2023", "2024年04月01日 周一 08:30", through `recall.ranking.dated`).

Resolved: today, tonight, yesterday, the day before yesterday, tomorrow, the day after
tomorrow, N days/weeks/months/years ago, in N days, last/this/next week, weekend, month, year,
last/next/this Friday, on Friday (the coming one in a plan, the past one otherwise); 今天, 今晚,
昨天, 前天, 明天, 后天, 大后天, N天前, N天后, 上周, 这周/本周, 下周, 上周五, 下周五, 周五, 上个月,
下个月, 去年, 今年, 明年. Vague words ("recently", "a few days ago", 最近) stay as they are.
"""

from __future__ import annotations

import re
from datetime import date, timedelta

from memctl.recall.ranking import dated

_MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
                "October", "November", "December")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAYS_ZH = "一二三四五六日天"
_ISO_DAY = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
                 "seven": 7, "eight": 8, "nine": 9, "ten": 10, "couple of": 2, "两": 2, "一": 1, "二": 2,
                 "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}
_UNIT_DAYS = {"day": 1, "week": 7, "天": 1, "周": 7, "星期": 7, "个星期": 7, "礼拜": 7, "个礼拜": 7}

_COUNT = r"(\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|couple of)"
_ENGLISH = re.compile(
    r"\b(?:(?P<before>the day before yesterday)|(?P<after>the day after tomorrow)"
    r"|(?P<word>today|tonight|this morning|this afternoon|this evening|yesterday|tomorrow)"
    r"|(?P<ago_n>" + _COUNT[1:-1] + r")\s+(?P<ago_unit>day|week|month|year)s?\s+ago"
    r"|in\s+(?P<in_n>" + _COUNT[1:-1] + r")\s+(?P<in_unit>day|week|month|year)s?"
    r"|(?P<rel>last|this|next|this past|this coming|on)\s+(?P<what>week(?:end)?|month|year|"
    + "|".join(_WEEKDAYS) + r"))\b",
    re.IGNORECASE)
_CHINESE = re.compile(
    r"(?P<zh_day>大后天|大前天|今天|今晚|今早|昨天|昨晚|前天|明天|明早|明晚|后天)"
    r"|(?P<zh_n>\d{1,3}|[一二两三四五六七八九十])(?P<zh_unit>天|周|个星期|星期|个礼拜|礼拜|个月|年)(?P<zh_dir>前|后|以前|以后|之前|之后)"
    r"|(?P<zh_rel>上个?|下个?|这个?|本)(?:(?:周|星期|礼拜)(?P<zh_wd>[一二三四五六日天])|(?P<zh_span>周末|周|星期|礼拜|月))"
    r"|(?<![每上下这本])(?:周|星期|礼拜)(?P<zh_bare_wd>[一二三四五六日天])"
    r"|(?P<zh_year>去年|今年|明年|前年)")
_CHINESE_DAYS = {"大前天": -3, "前天": -2, "昨天": -1, "昨晚": -1, "今天": 0, "今晚": 0, "今早": 0,
                 "明天": 1, "明早": 1, "明晚": 1, "后天": 2, "大后天": 3}
_CHINESE_YEARS = {"前年": -2, "去年": -1, "今年": 0, "明年": 1}
_ENGLISH_DAYS = {"today": 0, "tonight": 0, "this morning": 0, "this afternoon": 0, "this evening": 0,
                 "yesterday": -1, "tomorrow": 1}
_FUTURE_HINT = re.compile(r"\b(?:will|'ll|going to|gonna|plan(?:ning)?|next|tomorrow|coming|upcoming|"
                          r"can't wait|looking forward|hope to|want to|about to)\b|要|打算|准备|计划|将|会去",
                          re.IGNORECASE)


def message_day(time: str) -> date | None:
    """The day a message was said, from its `time`; None when it names none."""
    if not time:
        return None
    iso = _ISO_DAY.match(time.strip())
    if iso:
        return _day(int(iso[1]), int(iso[2]), int(iso[3]))
    named = dated.named_period(time[:80]) if any(ch.isdigit() for ch in time[:80]) else None
    if isinstance(named, dated.Period) and named.year is not None and named.day is not None:
        return _day(named.year, named.month, named.day)
    return None


def _day(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


class Resolved:
    """A text with its relative dates made absolute, and the first day it names (ISO) or ""."""

    __slots__ = ("text", "day")

    def __init__(self, text: str, day: str) -> None:
        self.text, self.day = text, day


def resolve(text: str, said: date | None) -> Resolved:
    """`text` with each relative date it names written as the absolute one, counted from `said`
    (the message's day); unchanged without a day to count from."""
    if said is None or not _may_name_relative(text):
        return Resolved(text, "")
    future = _FUTURE_HINT.search(text) is not None
    first: list[str] = []

    def english(match: re.Match) -> str:
        return _written(match, _english_span(match, said, future), first, chinese=False)

    def chinese(match: re.Match) -> str:
        return _written(match, _chinese_span(match, said, future), first, chinese=True)

    written = _ENGLISH.sub(english, text)
    if written[:1].islower() and text[:1].isupper():  # "Next Friday I'm …" -> "On 20 November 2026 …"
        written = written[:1].upper() + written[1:]
    written = _CHINESE.sub(chinese, written)
    return Resolved(written, first[0] if first else "")


_HINTS = ("day", "tonight", "morning", "afternoon", "evening", "tomorrow", "ago", "week", "month", "year",
          "in ", "天", "晚", "早", "周", "星期", "礼拜", "月", "年")


def _may_name_relative(text: str) -> bool:
    lowered = text.lower()
    return any(hint in lowered for hint in _HINTS)


def _written(match: re.Match, span: tuple[str, date, date] | None, first: list[str], chinese: bool) -> str:
    if span is None:
        return match.group(0)
    unit, start, _ = span
    if not first:
        first.append(start.isoformat())
    return _chinese_words(unit, start) if chinese else _english_words(unit, start, match.group(0))


def _english_words(unit: str, start: date, said: str) -> str:
    if unit == "day":
        lead = "" if said.lower().startswith("on ") else "on "
        return f"{lead}{start.day} {_MONTH_NAMES[start.month - 1]} {start.year}"
    if unit == "week":
        return f"in the week of {start.day} {_MONTH_NAMES[start.month - 1]} {start.year}"
    if unit == "weekend":
        return f"on the weekend of {start.day} {_MONTH_NAMES[start.month - 1]} {start.year}"
    if unit == "month":
        return f"in {_MONTH_NAMES[start.month - 1]} {start.year}"
    return f"in {start.year}"


def _chinese_words(unit: str, start: date) -> str:
    if unit == "day":
        return f"{start.year}年{start.month}月{start.day}日"
    if unit in ("week", "weekend"):
        return f"{start.year}年{start.month}月{start.day}日那{'周末' if unit == 'weekend' else '周'}"
    if unit == "month":
        return f"{start.year}年{start.month}月"
    return f"{start.year}年"


def _english_span(match: re.Match, said: date, future: bool) -> tuple[str, date, date] | None:
    if match["before"]:
        return _days(said, -2)
    if match["after"]:
        return _days(said, 2)
    if match["word"]:
        return _days(said, _ENGLISH_DAYS[match["word"].lower()])
    if match["ago_n"]:
        return _shifted(said, match["ago_unit"].lower(), -_count(match["ago_n"]))
    if match["in_n"]:
        return _shifted(said, match["in_unit"].lower(), _count(match["in_n"]))
    how, what = match["rel"].lower(), match["what"].lower()
    if what in _WEEKDAYS:
        return _days(said, _weekday_offset(said, _WEEKDAYS.index(what), how, future))
    if how == "on":
        return None
    step = {"last": -1, "this past": -1, "next": 1, "this coming": 1}.get(how, 0)
    return _shifted(said, what, step) if what != "weekend" else _weekend(said, step, future)


def _chinese_span(match: re.Match, said: date, future: bool) -> tuple[str, date, date] | None:
    if match["zh_day"]:
        return _days(said, _CHINESE_DAYS[match["zh_day"]])
    if match["zh_year"]:
        return _shifted(said, "year", _CHINESE_YEARS[match["zh_year"]])
    if match["zh_n"]:
        sign = -1 if "前" in match["zh_dir"] else 1
        unit = match["zh_unit"]
        count = _count(match["zh_n"])
        if unit in ("个月", "年"):
            return _shifted(said, "month" if unit == "个月" else "year", sign * count)
        return _days(said, sign * count * _UNIT_DAYS[unit])
    if match["zh_bare_wd"]:
        target = min(_WEEKDAYS_ZH.index(match["zh_bare_wd"]), 6)
        return _days(said, _weekday_offset(said, target, "on", future))
    step = 1 if match["zh_rel"].startswith("下") else -1 if match["zh_rel"].startswith("上") else 0
    if match["zh_wd"]:
        target = min(_WEEKDAYS_ZH.index(match["zh_wd"]), 6)
        monday = said - timedelta(days=said.weekday()) + timedelta(weeks=step)
        return _days(said, (monday + timedelta(days=target) - said).days)
    span = match["zh_span"]
    if span == "周末":
        return _weekend(said, step, future)
    return _shifted(said, "month" if span == "月" else "week", step)


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBER_WORDS.get(word.lower(), 1)


def _days(said: date, offset: int) -> tuple[str, date, date]:
    day = said + timedelta(days=offset)
    return "day", day, day


def _weekday_offset(said: date, target: int, how: str, future: bool) -> int:
    """Days from `said` to the weekday meant: "last Friday" the latest before the message, "next
    Friday" the first after it, "on Friday" / "this Friday" the coming one in a plan and the last
    one otherwise."""
    ahead, behind = (target - said.weekday()) % 7, (said.weekday() - target) % 7
    if how in ("next", "this coming"):
        return ahead or 7
    if how in ("last", "this past"):
        return -(behind or 7)
    return ahead if future else -behind


def _shifted(said: date, unit: str, step: int) -> tuple[str, date, date] | None:
    if unit == "day":
        return _days(said, step)
    if unit == "week":
        monday = said - timedelta(days=said.weekday()) + timedelta(weeks=step)
        return "week", monday, monday + timedelta(days=6)
    if unit == "month":
        year, month = divmod(said.year * 12 + said.month - 1 + step, 12)
        return "month", date(year, month + 1, 1), date(year, month + 1, 1)
    if unit == "year":
        return "year", date(said.year + step, 1, 1), date(said.year + step, 12, 31)
    return None


def _weekend(said: date, step: int, future: bool) -> tuple[str, date, date]:
    saturday = said - timedelta(days=said.weekday()) + timedelta(days=5)
    if step == 0 and not future and said.weekday() < 5:
        saturday -= timedelta(weeks=1)  # "this weekend" said on a Tuesday of a past story: the one just gone
    saturday += timedelta(weeks=step)
    return "weekend", saturday, saturday + timedelta(days=1)
