"""The ``cron`` timing: a five-field cron expression evaluated as wall-clock time in a zone.
Pure: no clock, no database.

``cron`` (the module) iterates an expression's naive wall times; this timing turns them into
UTC instants under the schedule's skipped and repeated rules (``zones.resolve``), and counts
long spans without listing them, exactly around each offset change.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar, Self
from zoneinfo import ZoneInfo

from ..clock import ensure_aware_utc
from . import cron as cronlib
from . import cron_words, timing_words
from .policies import RepeatedTime, SkippedTime, TimingKind
from .timing import (
    MAX_INSTANTS_PER_DAY,
    InvalidTiming,
    bounds,
    check_density,
    no_rule_fields,
    register,
    wall_clock_fields,
)
from .wall_clock import (
    WALL_CLOCK_FORM_FIELDS,
    WALL_MARGIN,
    check_wall_clock,
    chosen_choices,
    is_utc,
    wall_clock_arguments,
)
from .zones import offset_transitions as _offset_transitions
from .zones import resolve, zone

_FIRST_WINDOW = timedelta(hours=1)
_MAX_WINDOW = timedelta(days=31)
_HORIZON = timedelta(days=366 * 30)
_SAMPLE = timedelta(minutes=30)
# How far from an offset change its skipped and repeated local times can run: a repeated
# time's two instants lie within the change either side of it, a skipped time shifts to the
# change itself. The largest change is a day (Pacific/Apia skipped 30 December 2011), and
# counting lists a wall-clock margin past it (``WALL_MARGIN``).
_REACH = timedelta(days=1) + WALL_MARGIN


def _offset_changes(tz: ZoneInfo, start: datetime, end: datetime) -> bool:
    """Whether ``tz`` changes its UTC offset in ``[start, end]`` (sampled every 30 minutes;
    no zone changes its offset twice within that)."""
    offset = start.astimezone(tz).utcoffset()
    t = start
    while t < end:
        t = min(t + _SAMPLE, end)
        if t.astimezone(tz).utcoffset() != offset:
            return True
    return False


def _wall_margin(tz: ZoneInfo, start: datetime, end: datetime) -> timedelta:
    """How far past the local times of the window's edges the wall times of its instants can
    lie: nothing where ``tz`` keeps one offset, ``WALL_MARGIN`` near a DST change, and the
    change and that margin near a larger change. Pacific/Apia skipped 30 December 2011: each
    of its wall times runs (``skipped="shift"``) at the instant the day ended, so a window
    starting there holds instants whose wall times lie up to a day before its start's."""
    near = _offset_changes(tz, start - WALL_MARGIN, end + WALL_MARGIN)
    margin = WALL_MARGIN if near else timedelta(0)
    for instant, change in _offset_transitions(tz, start - _REACH, end + _REACH):
        if change > WALL_MARGIN and start - change <= instant <= end + change:
            margin = max(margin, change + WALL_MARGIN)
    return margin


@register
@dataclass(frozen=True)
class Cron:
    """A five-field cron expression, evaluated as wall-clock time in ``zone``.

    Like every timing, it is validated on first use (``validate()``), so that ``schedule()``
    can report a bad argument naming the schedule it belongs to.
    """

    wall_clock: ClassVar[bool] = True
    one_off: ClassVar[bool] = False
    fixed_instant: ClassVar[bool] = False
    form_fields: ClassVar[tuple[str, ...]] = ("cron", *WALL_CLOCK_FORM_FIELDS)

    expr: str
    zone: str = "UTC"
    skipped: SkippedTime = SkippedTime.SHIFT
    repeated: RepeatedTime = RepeatedTime.FIRST
    # Why a business-local schedule is not UTC (a documented deviation; see ``is_utc``).
    reason: str = ""
    kind: TimingKind = TimingKind.CRON
    # Which DST choices were made explicitly. ``cron()`` records what its caller gave; a
    # record read back from the database holds both.
    chosen: frozenset[str] = field(default=frozenset({"skipped", "repeated"}), compare=False)
    _valid: bool = field(default=False, init=False, repr=False, compare=False)

    def validate(self) -> Self:
        """Check and normalise the arguments once; ``InvalidTiming`` names the bad one."""
        if self._valid:
            return self
        try:
            object.__setattr__(self, "expr", cronlib.normalise(self.expr))
        except cronlib.InvalidCron as exc:
            raise InvalidTiming("timing.cron", str(exc)) from None
        skipped, repeated, reason = check_wall_clock(
            self.zone, self.skipped, self.repeated, self.reason
        )
        # Never over the bound (a cron's finest step is a minute), but checked like every
        # calendar timing's, so that lowering the bound holds for crons too.
        check_density("timing.cron", self.per_day(), "its minute and hour fields")
        object.__setattr__(self, "skipped", skipped)
        object.__setattr__(self, "repeated", repeated)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "_valid", True)
        return self

    def per_day(self) -> int:
        """The most wall times the expression matches on one date: its minutes times its
        hours, counted from the fields (``cron.count``'s minutes of a day)."""
        minutes = cronlib.minutes_of_day(self.expr)
        return MAX_INSTANTS_PER_DAY if minutes is None else len(minutes)

    @property
    def local(self) -> bool:
        """Whether this is a business-local schedule (its zone is not UTC)."""
        return not is_utc(self.zone)

    def between(self, start: datetime, end: datetime) -> list[datetime]:
        self.validate()
        start, end = bounds(start, end)
        if end <= start:
            return []
        tz = zone(self.zone)
        margin = _wall_margin(tz, start, end)
        wall_lo = start.astimezone(tz).replace(tzinfo=None) - margin - timedelta(microseconds=1)
        wall_hi = end.astimezone(tz).replace(tzinfo=None) + margin
        found = {
            instant
            for wall in cronlib.wall_times(self.expr, wall_lo, wall_hi)
            for instant in resolve(wall, tz, skipped=self.skipped, repeated=self.repeated)
            if start <= instant < end
        }
        return sorted(found)

    def count_between(self, start: datetime, end: datetime) -> int:
        """How many instants ``between`` would list, without listing them.

        Stretches where the zone keeps one offset are counted as wall times
        (``cron.count``, a step per matching day); around each offset change, as far as its
        skipped and repeated local times reach, the instants are listed by ``between``, so
        the skipped/repeated rules count exactly as they run. That reach runs past the
        window's edges: a window that starts in the second pass of a repeated hour, or at the
        instant a skipped hour's times shift to, holds no offset change of its own, yet its
        instants are not one per wall time.
        """
        self.validate()
        start, end = bounds(start, end)
        if end <= start:
            return 0
        tz = zone(self.zone)
        listed: list[tuple[datetime, datetime]] = []
        for instant, change in _offset_transitions(tz, start - _REACH, end + _REACH):
            lo, hi = (
                max(start, instant - change - WALL_MARGIN),
                min(end, instant + change + WALL_MARGIN),
            )
            if hi <= lo:  # its skipped and repeated times run outside the window
                continue
            if listed and lo <= listed[-1][1]:
                merged_lo, merged_hi = listed.pop()
                lo, hi = merged_lo, max(hi, merged_hi)
            listed.append((lo, hi))
        total, counted_to = 0, start
        for lo, hi in listed:
            total += self._count_one_offset(tz, counted_to, lo) + len(self.between(lo, hi))
            counted_to = hi
        return total + self._count_one_offset(tz, counted_to, end)

    def _count_one_offset(self, tz: ZoneInfo, start: datetime, end: datetime) -> int:
        """The instants in ``[start, end)``, where ``tz`` keeps one offset: one per wall time."""
        if end <= start:
            return 0
        offset = start.astimezone(tz).utcoffset()
        assert offset is not None
        tick = timedelta(microseconds=1)
        wall_lo = (start + offset).replace(tzinfo=None) - tick
        wall_hi = (end + offset).replace(tzinfo=None) - tick
        return cronlib.count(self.expr, wall_lo, wall_hi)

    def iter_from(self, start: datetime) -> Iterator[datetime]:
        """Instants from ``start`` on, evaluated window by window (windows grow while empty)."""
        self.validate()
        start = ensure_aware_utc(start, name="start")
        window, lo = _FIRST_WINDOW, start
        while lo < start + _HORIZON:
            hi = lo + window
            found = self.between(lo, hi)
            yield from found
            window = _FIRST_WINDOW if found else min(window * 2, _MAX_WINDOW)
            lo = hi

    def record_fields(self) -> dict[str, Any]:
        self.validate()
        return {
            "timing_kind": self.kind.value,
            "cron": self.expr,
            **wall_clock_fields(self.zone, self.skipped, self.repeated, self.reason),
            **no_rule_fields(),
        }

    def created(self, instant: datetime) -> Self:
        return self

    def words(self, *, now: datetime) -> timing_words.TimingWords:
        words = cron_words.describe(self.expr)
        return timing_words.wall_clock(
            f"{words.text} {self.zone}",
            words.times,
            zone_name=self.zone,
            skipped=self.skipped,
            repeated=self.repeated,
            now=now,
        )

    @classmethod
    def from_record(cls, fields: Any) -> Cron:
        return cls(
            fields.cron,
            fields.time_zone,
            fields.skipped_time,
            fields.repeated_time,
            getattr(fields, "zone_reason", ""),
        )

    @classmethod
    def from_form(cls, data: Mapping[str, Any]) -> Cron:
        return cron(data["cron"], **wall_clock_arguments(data))


def cron(
    expr: str,
    *,
    zone: str = "UTC",
    skipped: SkippedTime | str | None = None,
    repeated: RepeatedTime | str | None = None,
    reason: str = "",
) -> Cron:
    """A cron timing. ``zone`` names an IANA zone for a business-local schedule, which says
    why (``reason``) and what its DST transitions do: ``skipped`` (``"shift"`` or ``"skip"``)
    and ``repeated`` (``"first"``, ``"last"`` or ``"both"``), given explicitly (check
    ``django_jobs.E019``; a UTC schedule has no transitions and may leave them out)."""
    return Cron(
        expr,
        zone,
        SkippedTime.SHIFT if skipped is None else skipped,  # type: ignore[arg-type]
        RepeatedTime.FIRST if repeated is None else repeated,  # type: ignore[arg-type]
        reason,
        chosen=chosen_choices(skipped, repeated),
    )
