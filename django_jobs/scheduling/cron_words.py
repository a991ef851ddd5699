"""A five-field cron expression in words, for the admin and ``jobs inspect``: "daily at
09:00", "on weekdays at 09:00 and 17:30", "every 15 minutes". Readable, not exhaustive: an
expression it has no words for is quoted, and the expression is always shown beside them.
Pure: no clock, no database.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from croniter import croniter

from . import cron as cronlib
from .recurrence_words import _MONTH_NAMES as _MONTHS
from .recurrence_words import _day_number, _listing

# English names written out: strftime's %A and %B follow the machine's locale.
_DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
# More times of day than a sentence lists: "at 24 times of day".
_MAX_TIMES = 6


@dataclass(frozen=True)
class CronWords:
    """An expression in words (without its zone), and its local times of day when it has a
    few (None: every minute, every hour, or more than a sentence lists)."""

    text: str
    times: tuple[dt.time, ...] | None


def describe(expr: str) -> CronWords:
    """``expr`` in words: "daily at 09:00", "monthly on the 1st and the 15th at 06:30",
    "every 5 minutes"; an expression with ``#`` or ``W`` parts is quoted."""
    expr = cronlib.normalise(expr)
    fields, nth = croniter.expand(expr)
    minutes, hours, days, months, weekdays = fields
    if nth or any(not isinstance(v, int) for v in days if v not in ("*", "l")):
        return CronWords(f"when cron {expr!r} matches", None)
    clock, times = _time_phrase(minutes, hours)
    daily = hours != ["*"] and not clock.startswith("every")
    return CronWords(" ".join([*_date_phrases(days, months, weekdays, daily), clock]), times)


def _time_phrase(minutes: list[Any], hours: list[Any]) -> tuple[str, tuple[dt.time, ...] | None]:
    """``at 09:00``, ``every 15 minutes``, ``at :00 and :30 past every hour``."""
    if hours == ["*"]:
        if minutes == ["*"]:
            return "every minute", None
        step = _step(minutes, 60)
        if step is not None:
            return f"every {step} minutes", None
        return f"at {_listing([f':{m:02d}' for m in minutes])} past every hour", None
    if minutes == ["*"]:
        spans = [f"{h:02d}:00 to {h:02d}:59" for h in hours]
        return f"every minute from {_listing(spans)}", None
    hourly = _step(hours, 24)
    if hourly is not None and len(minutes) == 1:
        return f"every {hourly} hours at :{minutes[0]:02d}", None
    times = tuple(sorted(dt.time(h, m) for h in hours for m in minutes))
    if len(times) > _MAX_TIMES:
        return f"at {len(times)} times of day", None
    return "at " + _listing([t.strftime("%H:%M") for t in times]), times


def _step(values: list[Any], size: int) -> int | None:
    """N when ``values`` are ``0, N, 2N, ...`` and N divides ``size`` (``*/N``)."""
    if len(values) < 2 or values[0] != 0:
        return None
    step = values[1]
    assert isinstance(step, int)
    return step if size % step == 0 and values == list(range(0, size, step)) else None


def _date_phrases(
    days: list[Any], months: list[Any], weekdays: list[Any], daily: bool
) -> list[str]:
    """``daily``, ``on weekdays``, ``monthly on the 1st``, ``in January and July``..."""
    phrases = []
    day_words = ""
    if days != ["*"]:
        day_words = "on " + _listing(
            ["the last day" if d == "l" else _day_number(int(d)) for d in days]
        )
    week_words = ""
    if weekdays != ["*"]:
        names = sorted({int(d) % 7 for d in weekdays})
        week_words = (
            "on weekdays"
            if names == [1, 2, 3, 4, 5]
            else "on " + _listing([_DAYS[d] for d in names])
        )
    if months != ["*"]:
        phrases.append("in " + _listing([_MONTHS[int(m) - 1] for m in months]))
    elif day_words and not week_words:
        phrases.append("monthly")
    if day_words and week_words:  # cron matches either (Vixie cron's rule)
        phrases.append(f"{day_words} or {week_words}")
    elif day_words or week_words:
        phrases.append(day_words or week_words)
    elif not phrases and daily:
        phrases.append("daily")
    return phrases
