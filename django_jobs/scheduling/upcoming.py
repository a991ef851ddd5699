"""A timing's next runs as an operator reads them: each instant in the schedule's zone and in
UTC, marked where the zone's offset changes since the run before ("DST starts: -05:00 →
-04:00"), where a skipped local time was shifted, and where a local time happens twice.

Pure: no clock, no database. The instants are the timing's own (``Timing.between``, as the
planner asks them), searched in growing windows up to a bounded horizon.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

from .policies import SkippedTime
from .timing import Timing
from .timing_words import offset_words
from .zones import zone

# How many runs the schedule page shows, and how far ahead it looks for them: a yearly
# schedule shows ten runs, a rarer one those of the next ten years.
COUNT = 10
HORIZON = dt.timedelta(days=3653)
_FIRST_WINDOW = dt.timedelta(minutes=1)
_TICK = dt.timedelta(microseconds=1)


@dataclass(frozen=True)
class UpcomingRun:
    """One planned instant: ``at`` in UTC, ``local`` in the schedule's zone, and ``marks``
    (each a phrase: "DST starts: -05:00 → -04:00", "02:30 skipped (DST gap): shifted to
    03:00", "01:30 happens twice: the second (EST)")."""

    at: dt.datetime
    local: dt.datetime
    marks: tuple[str, ...] = ()

    @property
    def offset(self) -> str:
        offset = self.local.utcoffset()
        assert offset is not None
        return offset_words(offset)

    @property
    def local_words(self) -> str:
        """``Sun 2027-03-14 09:00:00 EDT``: in the schedule's zone, named by its abbreviation."""
        return f"{instant_words(self.local)} {self.local.tzname()}"

    @property
    def utc_words(self) -> str:
        """``Sun 2027-03-14 13:00:00 UTC``."""
        return f"{instant_words(self.at)} UTC"


# English names written out: strftime's %a follows the machine's locale.
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def instant_words(moment: dt.datetime) -> str:
    """``Sun 2027-03-14 09:00:00``: the wall time of ``moment`` in its own zone (never the
    machine's or Django's)."""
    return f"{_WEEKDAYS[moment.weekday()]} {moment:%Y-%m-%d %H:%M:%S}"


def instants(
    timing: Timing, *, now: dt.datetime, count: int = COUNT, horizon: dt.timedelta = HORIZON
) -> list[dt.datetime]:
    """The first ``count`` instants of ``timing`` from ``now`` on, within ``horizon``.

    Windows from ``now`` grow fourfold while they hold too few, so a frequent timing lists a
    few minutes' worth and a monthly one a year's; the last window ends at the horizon.
    """
    found: list[dt.datetime] = []
    end = now + horizon
    lo, window = now, _FIRST_WINDOW
    while lo < end and len(found) < count:
        hi = min(lo + window, end)
        found += timing.between(lo, hi)
        lo, window = hi, window * 4
    return found[:count]


def next_runs(
    timing: Timing, *, now: dt.datetime, count: int = COUNT, horizon: dt.timedelta = HORIZON
) -> list[UpcomingRun]:
    """The next ``count`` runs of ``timing`` from ``now`` on (within ``horizon``), each in
    its zone (UTC for elapsed-time and one-off timings) and marked."""
    tz = zone(timing.zone)
    runs = []
    previous = now.astimezone(tz)
    for instant in instants(timing, now=now, count=count, horizon=horizon):
        local = instant.astimezone(tz)
        marks = [m for m in (_offset_change(previous, local), _repeated(local, tz)) if m]
        if timing.wall_clock and _shifted(timing, instant):
            marks.append(f"shifted: a skipped local time (DST gap) runs at {local:%H:%M}")
        runs.append(UpcomingRun(instant, local, tuple(marks)))
        previous = local
    return runs


def _offset_change(previous: dt.datetime, local: dt.datetime) -> str:
    """ "DST starts: -05:00 → -04:00" when ``local``'s offset is not ``previous``'s."""
    before, after = previous.utcoffset(), local.utcoffset()
    if before == after:
        return ""
    assert before is not None
    assert after is not None
    was, now = previous.dst() or dt.timedelta(0), local.dst() or dt.timedelta(0)
    what = "DST starts" if now > was else "DST ends" if now < was else "UTC offset changes"
    return f"{what}: {offset_words(before)} → {offset_words(after)}"


def _repeated(local: dt.datetime, tz: ZoneInfo) -> str:
    """ "01:30 happens twice: this is the first (EDT)" for a local time the clocks repeat."""
    other = local.replace(fold=1 - local.fold)
    if other.astimezone(dt.UTC) == local.astimezone(dt.UTC):
        return ""
    which = "second" if local.fold else "first"
    return f"{local:%H:%M} happens twice: this is the {which} ({local.tzname()})"


def _shifted(timing: Any, instant: dt.datetime) -> bool:
    """Whether ``instant`` runs only because a skipped local time shifts to it: the same
    wall-clock timing (a dataclass with a ``skipped`` choice) with ``skipped="skip"`` does
    not produce it."""
    if timing.skipped != SkippedTime.SHIFT:
        return False
    tz = zone(timing.zone)
    if (instant - _TICK).astimezone(tz).utcoffset() == instant.astimezone(tz).utcoffset():
        return False  # a shifted run is at the very instant the clocks jump
    skipping = dataclasses.replace(timing, skipped=SkippedTime.SKIP)
    return instant not in skipping.between(instant, instant + _TICK)
