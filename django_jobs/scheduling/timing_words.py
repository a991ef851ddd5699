"""A timing in words, in its zone and in UTC, with what its DST rules do: "daily at 09:00
America/New_York (13:00 or 14:00 UTC depending on DST); a skipped 09:00 shifts to the first
instant after the gap; a repeated 09:00 runs once, at its first instance". For the admin's
schedule page and ``jobs inspect``.

Pure: no clock, no database. Which offsets a zone uses, and where its clocks change, are read
for the year after the ``now`` the caller passes.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from zoneinfo import ZoneInfo

from .policies import RepeatedTime, SkippedTime
from .recurrence_words import _listing
from .wall_clock import is_utc
from .zones import offset_transitions, zone

if TYPE_CHECKING:
    from .recurrences import Recurrence
    from .timing import Timing

# How far ahead a zone's offsets and clock changes are read.
YEAR = dt.timedelta(days=366)
_TICK = dt.timedelta(microseconds=1)

_SKIPPED = {
    SkippedTime.SHIFT: "shifts to the first instant after the gap",
    SkippedTime.SKIP: "does not run that day",
}
_REPEATED = {
    RepeatedTime.FIRST: "runs once, at its first instance",
    RepeatedTime.LAST: "runs once, at its second instance",
    RepeatedTime.BOTH: "runs twice, at both instances",
}


class _HasRecurrence(Protocol):
    @property
    def recurrence(self) -> Recurrence: ...


@dataclass(frozen=True)
class TimingWords:
    """``when``: the timing in its zone; ``in_utc``: the same in UTC; ``dst``: what its
    skipped and repeated local times do, and where the zone's clocks change ("" for
    elapsed-time and UTC timings)."""

    when: str
    in_utc: str
    dst: str = ""

    @property
    def text(self) -> str:
        """One sentence: "daily at 09:00 America/New_York (13:00 or 14:00 UTC depending on
        DST); a skipped 09:00 shifts to ..."."""
        head = f"{self.when} ({self.in_utc})" if self.in_utc else self.when
        return f"{head}; {self.dst}" if self.dst else head


@dataclass(frozen=True)
class ClockChange:
    """Where a zone's clocks change: the instant, and the local wall time before and after."""

    at: dt.datetime
    before: dt.timedelta
    after: dt.timedelta

    def local(self, offset: dt.timedelta) -> str:
        return (self.at + offset).strftime("%H:%M")

    @property
    def words(self) -> str:
        """``2027-03-14 02:00 → 03:00``"""
        day = f"{(self.at + self.before):%Y-%m-%d}"
        return f"{day} {self.local(self.before)} → {self.local(self.after)}"


def clock_changes(tz: ZoneInfo, start: dt.datetime, end: dt.datetime) -> list[ClockChange]:
    """The changes of ``tz``'s UTC offset in ``(start, end]``, in order (found as the cron
    timing counts across them)."""
    return [
        ClockChange(at, _offset(at - _TICK, tz), _offset(at, tz))
        for at, _ in offset_transitions(tz, start, end)
    ]


def _offset(instant: dt.datetime, tz: ZoneInfo) -> dt.timedelta:
    return instant.astimezone(tz).utcoffset() or dt.timedelta(0)


def describe(timing: Timing, *, now: dt.datetime) -> TimingWords:
    """``timing`` in words, its zone's offsets and clock changes read for the year after
    ``now``: each kind says its own (``Timing.words``)."""
    return timing.words(now=now)


def wall_clock(
    when: str,
    times: tuple[dt.time, ...] | None,
    *,
    zone_name: str,
    skipped: str,
    repeated: str,
    now: dt.datetime,
) -> TimingWords:
    """The words of a wall-clock timing: ``when`` (the timing in its zone), at the local
    ``times`` of day (None: too many to name), in UTC, and what its ``skipped`` and
    ``repeated`` local times do where ``zone_name``'s clocks change in the year after
    ``now``."""
    if is_utc(zone_name):
        return TimingWords(when, "")
    tz = zone(zone_name)
    changes = clock_changes(tz, now, now + YEAR)
    offsets = sorted(
        {now.astimezone(tz).utcoffset() or dt.timedelta(0)} | {c.after for c in changes}
    )
    in_utc = _in_utc(times, offsets, now, tz)
    if not changes:
        return TimingWords(
            when, in_utc, f"{zone_name} does not change its clocks in the coming year"
        )
    named = times[0].strftime("%H:%M") if times is not None and len(times) == 1 else "local time"
    dst = (
        f"a skipped {named} {_SKIPPED[SkippedTime(skipped)]}; "
        f"a repeated {named} {_REPEATED[RepeatedTime(repeated)]} "
        f"(clocks change {_listing([c.words for c in changes])})"
    )
    return TimingWords(when, in_utc, dst)


def _in_utc(
    times: tuple[dt.time, ...] | None, offsets: list[dt.timedelta], now: dt.datetime, tz: ZoneInfo
) -> str:
    """``13:00 or 14:00 UTC depending on DST``; ``14:00 UTC``; for several times or none,
    the offsets."""
    if times is not None and len(times) == 1:
        shown = sorted({_utc_time(times[0], offset) for offset in offsets})
        if len(shown) == 1:
            return f"{shown[0]} UTC"
        return f"{' or '.join(shown)} UTC depending on DST"
    if times is not None and len(offsets) == 1:
        return f"{_listing([_utc_time(t, offsets[0]) for t in times])} UTC"
    if times is not None:
        groups = [
            f"{_listing([_utc_time(t, o) for t in times])} at UTC{offset_words(o)}" for o in offsets
        ]
        return "in UTC: " + "; ".join(groups)
    if len(offsets) == 1:
        return f"UTC{offset_words(offsets[0])}"
    return "UTC" + " or UTC".join(offset_words(o) for o in offsets) + " depending on DST"


def _utc_time(local: dt.time, offset: dt.timedelta) -> str:
    """The UTC time of day of ``local`` at ``offset``, with the day it falls on when not the
    same: ``02:00 (+1 day)``."""
    wall = dt.datetime.combine(dt.date(2000, 1, 2), local) - offset
    shift = (wall.date() - dt.date(2000, 1, 2)).days
    day = f" ({shift:+d} day)" if shift else ""
    return wall.strftime("%H:%M") + day


def rule_times(timing: _HasRecurrence) -> tuple[dt.time, ...] | None:
    """The local times of day of a calendar rule (an ``RRule``) that runs at a few (not an
    hourly one)."""
    recurrence = timing.recurrence
    if recurrence.freq == "HOURLY":
        return None
    parts = recurrence.explicit_parts
    numbers = [
        [int(v) for v in parts[name].split(",")] for name in ("BYHOUR", "BYMINUTE", "BYSECOND")
    ]
    times = tuple(
        sorted(dt.time(h, m, s) for h in numbers[0] for m in numbers[1] for s in numbers[2])
    )
    return times if len(times) <= 6 else None


def offset_words(offset: dt.timedelta) -> str:
    """``-05:00``, ``+05:30``."""
    sign = "-" if offset < dt.timedelta(0) else "+"
    minutes = abs(int(offset.total_seconds())) // 60
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def duration(value: dt.timedelta) -> str:
    """``10 seconds``, ``1 hour 30 minutes``, ``2 days``, ``0 seconds``."""
    seconds = int(value.total_seconds())
    parts = []
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count} {unit}{'s' if count != 1 else ''}")
    return " ".join(parts) or "0 seconds"
