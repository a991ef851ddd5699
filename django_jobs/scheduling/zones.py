"""Turning a local wall-clock time into UTC instants, with explicit DST rules.

A wall time in a zone is one of three things: normal (one instant), skipped (spring forward:
no instant), or repeated (fall back: two instants). ``resolve`` applies the schedule's
``skipped`` and ``repeated`` policies to it. zoneinfo's ``fold`` tells the two readings apart
(PEP 495).
"""

from __future__ import annotations

import functools
import math
from datetime import UTC, datetime, timedelta
from importlib import resources
from zoneinfo import ZoneInfo

from .policies import RepeatedTime, SkippedTime


def zone(name: str) -> ZoneInfo:
    """The IANA zone called ``name``; a ``ValueError`` naming it when there is none."""
    if not isinstance(name, str) or name not in iana_names():
        raise ValueError(
            f"{name!r} is not an IANA time zone identifier (for example 'Europe/London')"
        )
    return ZoneInfo(name)


@functools.cache
def iana_names() -> frozenset[str]:
    """The IANA zone identifiers, from the ``tzdata`` package's list.

    Not ``zoneinfo.available_timezones()``: that scans the host's zone folder too, which holds
    ``localtime``, the machine's own zone.
    """
    listed = resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8").split()
    return frozenset(listed) - {"Factory"}


def _utc(wall: datetime, tz: ZoneInfo, fold: int) -> datetime:
    return wall.replace(tzinfo=tz, fold=fold).astimezone(UTC)


def _exists(wall: datetime, tz: ZoneInfo, instant: datetime) -> bool:
    return instant.astimezone(tz).replace(tzinfo=None) == wall


def resolve(
    wall: datetime, tz: ZoneInfo, *, skipped: SkippedTime, repeated: RepeatedTime
) -> list[datetime]:
    """The UTC instants at which a naive local ``wall`` time in ``tz`` runs, in order."""
    early, late = _utc(wall, tz, 0), _utc(wall, tz, 1)
    if early == late:  # one offset either way: neither skipped nor repeated (PEP 495)
        return [early]
    early_ok, late_ok = _exists(wall, tz, early), _exists(wall, tz, late)
    if early_ok != late_ok:
        return [early if early_ok else late]
    if early_ok and late_ok:  # a repeated local time: two instants
        first, last = sorted((early, late))
        if repeated == RepeatedTime.FIRST:
            return [first]
        if repeated == RepeatedTime.LAST:
            return [last]
        return [first, last]
    # A skipped local time: neither reading exists.
    if skipped == SkippedTime.SKIP:
        return []
    return [gap_end(min(early, late), max(early, late), tz)]


def gap_end(before: datetime, after: datetime, tz: ZoneInfo) -> datetime:
    """The first instant after a gap: where the offset changes between ``before`` and ``after``.

    Binary search over whole seconds (transitions fall on whole seconds).
    """
    offset_after = after.astimezone(tz).utcoffset()
    lo, hi = math.floor(before.timestamp()), math.ceil(after.timestamp())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == offset_after:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)


# How often a long span is sampled for offset changes (no zone changes its offset twice
# within 12 hours).
_COUNT_SAMPLE = timedelta(hours=12)


def offset_transitions(
    tz: ZoneInfo, start: datetime, end: datetime
) -> list[tuple[datetime, timedelta]]:
    """Where ``tz`` changes its UTC offset in ``(start, end]``, each with the size of the
    change."""
    found = []
    t, offset = start, start.astimezone(tz).utcoffset()
    while t < end:
        following = min(t + _COUNT_SAMPLE, end)
        new = following.astimezone(tz).utcoffset()
        if new != offset:
            assert new is not None
            assert offset is not None
            found.append((gap_end(t, following, tz), abs(new - offset)))
            offset = new
        t = following
    return found
