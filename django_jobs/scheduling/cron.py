"""Cron expressions iterated as naive wall-clock times, forward only.

Zone handling is deliberately not left to the cron library: croniter and cronsim each apply
their own implicit DST behaviour in their zone-aware modes (and disagree, and have anomalies).
Naive wall-clock iteration is plain and correct in both, so this module only ever asks croniter
for the next naive wall time; ``zones.resolve`` turns wall times into UTC instants.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterator
from datetime import datetime, timedelta

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# Far more wall times than any evaluation window holds (a per-minute cron over 60 days is
# 86,400): a bound on the loop, never a limit a real schedule meets.
MAX_ITERATIONS = 200_000
MAX_LENGTH = 200  # the width of Schedule.cron


class InvalidCron(ValueError):
    pass


def normalise(expr: str) -> str:
    """The five-field form of ``expr``; ``InvalidCron`` saying why when it is not one."""
    if not isinstance(expr, str):
        raise InvalidCron(f"a cron expression must be text, got {expr!r}")
    text = " ".join(expr.split())
    text = ALIASES.get(text.lower(), text)
    if len(text.split(" ")) != 5:
        raise InvalidCron(
            f"{expr!r} is not a five-field cron expression (minute hour day month weekday)"
        )
    if len(text) > MAX_LENGTH:
        raise InvalidCron(f"a cron expression must be at most {MAX_LENGTH} characters")
    if not croniter.is_valid(text):
        raise InvalidCron(f"{expr!r} is not a valid cron expression{_bad_field(text)}")
    try:
        # A naive wall time on purpose: croniter's zone handling is never used.
        croniter(text, datetime(2000, 1, 1)).get_next(datetime)  # noqa: DTZ001
    except (CroniterBadDateError, CroniterBadCronError):
        raise InvalidCron(f"{expr!r} never matches a date") from None
    return text


# The five fields in order: the name an error gives each, and the values it takes.
FIELDS = (
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or jan-dec"),
    ("day-of-week", "0-7 or sun-sat"),
)


def _bad_field(text: str) -> str:
    """``: cron field 'minute' is '61': must be 0-59`` for the first field that is invalid on
    its own (the others ``*``); nothing when only the combination is."""
    values = text.split(" ")
    for index, (name, allowed) in enumerate(FIELDS):
        alone = " ".join(value if i == index else "*" for i, value in enumerate(values))
        if not croniter.is_valid(alone):
            return f": cron field {name!r} is {values[index]!r}: must be {allowed}"
    return ""


def wall_times(expr: str, after: datetime, until: datetime) -> Iterator[datetime]:
    """Naive wall times matching ``expr`` with ``after < t <= until``, in order."""
    if after.tzinfo is not None or until.tzinfo is not None:
        raise ValueError("wall_times takes naive wall-clock datetimes")
    iterator = croniter(expr, after)
    for _ in range(MAX_ITERATIONS):
        try:
            wall: datetime = iterator.get_next(datetime)
        except CroniterBadDateError:
            return
        if wall > until:
            return
        yield wall
    raise RuntimeError(f"cron {expr!r} produced over {MAX_ITERATIONS} times in one window")


_DAY = timedelta(days=1)
_MINUTE = timedelta(minutes=1)
_TICK = timedelta(microseconds=1)


@functools.cache
def minutes_of_day(expr: str) -> tuple[int, ...] | None:
    """The minutes of a matching day (``hour * 60 + minute``) at which ``expr`` matches, in
    order: the same on every matching day. ``None`` if croniter cannot expand the fields."""
    try:
        fields = croniter.expand(expr)[0]
    except (CroniterBadCronError, ValueError):
        return None
    minutes, hours = (
        list(range(n)) if f == ["*"] else f for f, n in zip(fields[:2], (60, 24), strict=True)
    )
    if not all(isinstance(v, int) for v in [*minutes, *hours]):
        return None
    return tuple(sorted({h * 60 + m for h in hours for m in minutes}))


def count(expr: str, after: datetime, until: datetime) -> int:
    """How many naive wall times match ``expr`` with ``after < t <= until``, without listing
    them: a step per matching day (croniter walks the day fields), and on each the minutes of
    the day that match are counted by bisection. A per-minute expression over a year costs
    365 steps, not 525,600."""
    minutes = minutes_of_day(expr)
    if minutes is None:
        return sum(1 for _ in wall_times(expr, after, until))
    first = after.replace(second=0, microsecond=0) + _MINUTE  # wall times are whole minutes
    last = until.replace(second=0, microsecond=0)
    if first > last:
        return 0
    first_day = first.replace(hour=0, minute=0)
    last_day = last.replace(hour=0, minute=0)
    # The same day fields at midnight: croniter applies them as in ``expr`` (day of month OR
    # day of week when both are restricted).
    days = croniter(" ".join(["0", "0", *expr.split(" ")[2:]]), first_day - _TICK)
    total = 0
    while True:
        try:
            day: datetime = days.get_next(datetime)
        except CroniterBadDateError:
            break
        if day > last_day:
            break
        lo = (first - day) // _MINUTE if day == first_day else 0
        hi = (last - day) // _MINUTE if day == last_day else 24 * 60 - 1
        total += bisect.bisect_right(minutes, hi) - bisect.bisect_left(minutes, lo)
    return total
