"""memctl.core.clock.stamp gives the text iso(now()) gives, without datetime on its fast path."""

from __future__ import annotations

import re

import pytest

from memctl.core import clock
from memctl.core.errors import UsageError

FIXED = ["2026-06-01T04:00:00", "2024-02-29T23:59:59", "0001-01-01T00:00:00", "9999-12-31T23:59:59",
         "2026-06-01T04:00:00.250000", "2026-06-01 04:00:00", "2026-06-01", "2026-06-01T04:00",
         "2026-06-01T04:00:00+02:00", "  2026-06-01T04:00:00  ", "2026-06-01X04:00:00"]
NOT_STAMPS = ["2026-02-29T00:00:00", "2100-02-29T00:00:00", "2026-13-01T00:00:00", "2026-04-31T00:00:00",
              "2026-06-01T24:00:00", "2026-06-01T04:60:00", "2026-06-01T04:00:60", "0000-01-01T00:00:00",
              "yesterday", "2026-06-01T04:00:0٣"]


@pytest.mark.parametrize("fixed", FIXED)
def test_a_fixed_now_gives_the_stamp_datetime_gives(monkeypatch, fixed):
    monkeypatch.setenv("MEMCTL_NOW", fixed)
    assert clock.stamp() == clock.iso(clock.now())


@pytest.mark.parametrize("fixed", NOT_STAMPS)
def test_a_fixed_now_that_is_no_timestamp_is_refused_as_datetime_refuses_it(monkeypatch, fixed):
    monkeypatch.setenv("MEMCTL_NOW", fixed)
    with pytest.raises(UsageError):
        clock.now()
    with pytest.raises(UsageError):
        clock.stamp()


def test_the_real_clock_gives_a_seconds_stamp(monkeypatch):
    monkeypatch.delenv("MEMCTL_NOW", raising=False)
    before = clock.iso(clock.now())
    made = clock.stamp()
    after = clock.iso(clock.now())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", made) and before <= made <= after


def test_timestamp_is_now_in_seconds_under_memctl_now_or_the_real_clock(monkeypatch):
    import time
    from datetime import datetime

    monkeypatch.setenv("MEMCTL_NOW", "2026-04-05T09:00:00")
    assert clock.timestamp() == datetime(2026, 4, 5, 9, 0, 0).timestamp()
    monkeypatch.delenv("MEMCTL_NOW")
    before = time.time()
    assert before <= clock.timestamp() <= time.time()
