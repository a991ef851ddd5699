"""Cron expressions iterated as naive wall-clock times, forward only.

Zone handling is deliberately not left to the cron library: croniter and cronsim each apply
their own implicit DST behaviour in their zone-aware modes (and disagree, and have anomalies).
Naive wall-clock iteration is plain and correct in both, so this module only ever asks croniter
for the next naive wall time; ``zones.resolve`` turns wall times into UTC instants.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

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
        raise InvalidCron(f"{expr!r} is not a valid cron expression")
    try:
        # A naive wall time on purpose: croniter's zone handling is never used.
        croniter(text, datetime(2000, 1, 1)).get_next(datetime)  # noqa: DTZ001
    except (CroniterBadDateError, CroniterBadCronError):
        raise InvalidCron(f"{expr!r} never matches a date") from None
    return text


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
