"""Every zone with a 2026 offset change: no run missed, none repeated, none out of order.

croniter 7.0 and cronsim 2.8 each showed DST anomalies across these zones in their zone-aware
modes; django_jobs iterates naive wall times and resolves them itself, and this test holds it
to that across all of tzdata.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, available_timezones

import pytest

from django_jobs import cron

YEAR_START = datetime(2026, 1, 1, tzinfo=UTC)
YEAR_END = datetime(2027, 1, 1, tzinfo=UTC)


def transitions(name: str) -> list[datetime]:
    """The instants in 2026 at which ``name`` changes its UTC offset (to the second)."""
    tz = ZoneInfo(name)
    found, step, t = [], timedelta(hours=6), YEAR_START
    while t < YEAR_END:
        if (t + step).astimezone(tz).utcoffset() != t.astimezone(tz).utcoffset():
            lo, hi = int(t.timestamp()), int((t + step).timestamp())
            offset = t.astimezone(tz).utcoffset()
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if datetime.fromtimestamp(mid, tz).utcoffset() == offset:
                    lo = mid
                else:
                    hi = mid
            found.append(datetime.fromtimestamp(hi, UTC))
        t += step
    return found


ZONES = sorted(z for z in available_timezones() if transitions(z))


def test_there_are_many_zones_with_2026_transitions() -> None:
    assert len(ZONES) > 150


def _daily_at(wall: datetime) -> str:
    return f"{wall.minute} {wall.hour} * * *"


@pytest.mark.parametrize("name", ZONES)
def test_daily_runs_around_every_transition(name: str) -> None:
    tz = ZoneInfo(name)
    for moment in transitions(name):
        before = (moment - timedelta(seconds=1)).astimezone(tz).utcoffset()
        after = moment.astimezone(tz).utcoffset()
        assert before is not None
        assert after is not None
        # A wall time a minute (rounded) inside the gap or the repeated stretch.
        wall = (moment - timedelta(seconds=1)).astimezone(tz).replace(tzinfo=None)
        wall = (
            (wall + timedelta(minutes=1)).replace(second=0)
            if after > before
            else ((moment + timedelta(minutes=1)).astimezone(tz).replace(tzinfo=None, second=0))
        )
        days = (moment - timedelta(days=3), moment + timedelta(days=3))
        expr = _daily_at(wall)
        runs = {
            (s, r): cron(expr, zone=name, skipped=s, repeated=r).between(*days)
            for s in ("shift", "skip")
            for r in ("first", "last", "both")
        }
        for got in runs.values():
            assert got == sorted(set(got)), f"{name} {expr}: out of order or repeated"
        if after > before:  # spring forward: the wall time does not exist on one day
            assert len(runs["shift", "first"]) == len(runs["skip", "first"]) + 1, name
            assert moment in runs["shift", "first"], f"{name}: shift must run at the gap's end"
            assert moment not in runs["skip", "first"], name
        else:  # fall back: the wall time happens twice on one day
            first, last, both = (runs["shift", r] for r in ("first", "last", "both"))
            assert len(first) == len(last) == len(both) - 1, name
            (extra,) = set(both) - set(first)
            (earlier,) = set(both) - set(last)
            assert earlier < extra, f"{name}: first must be the earlier reading"
            assert extra - earlier == before - after, name
        # Every run, read back in the zone, is the declared wall time (or a shifted gap run).
        for instant in runs["skip", "both"]:
            local = instant.astimezone(tz)
            assert (local.hour, local.minute) == (wall.hour, wall.minute), (name, instant)
