"""How a person reads a duration or an instant, wherever django_jobs shows one to a person: the
admin's pages, the dashboard, ``manage.py jobs`` (its text, not its ``--json``).

- ``duration``: ``43 ms``, ``2.5 s``, ``43 s``, ``1 min 26 s``, ``2 h 3 min``, ``1 d 4 h``;
  never ``0:01:25.681976``.
- ``instant``: ``2026-12-02 14:40:07 UTC``, to the second, with its zone; never converted to
  the machine's zone or Django's ``TIME_ZONE`` (django_jobs reads neither).

Machine-read output (``--json``, metrics, log fields) keeps numbers of seconds and ISO 8601.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EMPTY = "-"

# Each unit with the next smaller one shown beside it: "2 h 3 min", not "2 h 3 min 4 s".
_UNITS = ((86400, "d", 3600, "h"), (3600, "h", 60, "min"), (60, "min", 1, "s"))


def duration(value: timedelta | float | None, empty: str = EMPTY) -> str:
    """``value`` (a timedelta, or seconds) in words: milliseconds under a second, seconds with
    one decimal under ten, then whole units with the next smaller one (rounded to the
    second); ``empty`` for None. Negative (early) as ``-3 s``."""
    if value is None:
        return empty
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    sign, seconds = ("-", -seconds) if seconds < 0 else ("", seconds)
    if round(seconds * 1000) < 1000:
        return f"{sign}{round(seconds * 1000)} ms"
    if round(seconds, 1) < 10:
        return f"{sign}{round(seconds, 1):g} s"
    whole = round(seconds)
    for size, unit, smaller, small_unit in _UNITS:
        if whole >= size:
            rest = (whole % size) // smaller
            return f"{sign}{whole // size} {unit}" + (f" {rest} {small_unit}" if rest else "")
    return f"{sign}{whole} s"


def instant(moment: datetime | None, empty: str = EMPTY, *, exact: bool = False) -> str:
    """``moment`` as ``YYYY-MM-DD HH:MM:SS UTC`` (to the second), ``empty`` for None; with
    ``exact``, its microseconds too when it has any (``06:30:34.341454 UTC``: what tells two
    enqueued occurrences of one second apart). A naive value is taken as UTC (what a UTC
    database holds). Never converted to another zone, so every instant from 0001-01-01 to
    9999-12-31 UTC can be shown."""
    if moment is None:
        return empty
    in_utc = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    timespec = "microseconds" if exact and in_utc.microsecond else "seconds"
    # isoformat, not strftime: strftime's %Y drops the leading zeros of a year before 1000.
    return f"{in_utc.replace(tzinfo=None).isoformat(sep=' ', timespec=timespec)} UTC"
