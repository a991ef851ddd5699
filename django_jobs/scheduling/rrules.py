"""The ``rrule`` timing: an iCalendar (RFC 5545) recurrence rule, with a business calendar.
Pure: no clock, no database.

Like ``cron``, a rule is evaluated as naive wall-clock time (``recurrences``, python-dateutil,
no tzinfo), and ``zones.resolve`` turns each wall time into UTC instants under the schedule's
skipped and repeated rules. A ``Calendar`` excludes local dates: an occurrence on one is
skipped, or moved to the next or previous date that is not excluded, at the same wall time
(``OnExcluded``).
"""

from __future__ import annotations

import datetime as dt
import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self
from zoneinfo import ZoneInfo

from ..clock import ensure_aware_utc
from . import recurrence_words, timing_words
from .calendars import FIELD as CALENDAR_FIELD
from .calendars import MAX_RUN, Calendar, calendar
from .policies import OnExcluded, RepeatedTime, SkippedTime, TimingKind
from .recurrences import (
    DEFAULT_DTSTART,
    FIELD,
    FREQUENCIES,
    INTEGER_PARTS,
    MAX_INTERVAL,
    MAX_LENGTH,
    PARTS,
    REFUSED_PARTS,
    WEEKDAYS,
    Recurrence,
    parse,
)
from .timing import MAX_INSTANTS_PER_DAY, InvalidTiming, bounds, register, wall_clock_fields
from .wall_clock import (
    WALL_CLOCK_FORM_FIELDS,
    WALL_MARGIN,
    check_wall_clock,
    chosen_choices,
    is_utc,
    wall_clock_arguments,
)
from .zones import resolve, zone

# The rule's own names, importable from here as they always were.
__all__ = [
    "DEFAULT_DTSTART",
    "FIELD",
    "FREQUENCIES",
    "INTEGER_PARTS",
    "MAX_INTERVAL",
    "MAX_LENGTH",
    "PARTS",
    "REFUSED_PARTS",
    "WEEKDAYS",
    "RRule",
    "Recurrence",
    "from_fields",
    "parse",
    "rrule",
]

# The most wall times counting one day of a rule may walk. With occurrences moved off excluded
# dates, the instants of a day come from the run of excluded days before it (``"next"``) or
# after it (``"previous"``) too, each walked: ``per_day x (longest run + 1)`` wall times. A
# densest rule (one a minute) may then cross a week of excluded days: counting a day walks at
# most 11,520 wall times, some tens of milliseconds, well inside a plan pass's budget.
MAX_WALLS_PER_DAY = 8 * MAX_INSTANTS_PER_DAY

_MOVES = {
    OnExcluded.SKIP: "",
    OnExcluded.NEXT: ", moved to the next business day",
    OnExcluded.PREVIOUS: ", moved to the previous business day",
}


@register
@dataclass(frozen=True)
class RRule:
    """An RFC 5545 recurrence rule evaluated as wall-clock time in ``zone``, optionally with a
    business calendar (``exclude``) and what an excluded occurrence does (``on_excluded``).

    Validated on first use (``validate()``), like every timing, so that ``schedule()`` can
    report a bad argument naming its schedule; ``exclude`` then holds a ``Calendar`` or None.
    """

    wall_clock: ClassVar[bool] = True
    one_off: ClassVar[bool] = False
    fixed_instant: ClassVar[bool] = False
    form_fields: ClassVar[tuple[str, ...]] = ("rrule", *WALL_CLOCK_FORM_FIELDS)

    rule: str
    zone: str = "UTC"
    skipped: SkippedTime = SkippedTime.SHIFT
    repeated: RepeatedTime = RepeatedTime.FIRST
    reason: str = ""  # why a business-local schedule is not UTC
    exclude: Any = None
    on_excluded: OnExcluded = OnExcluded.SKIP
    kind: TimingKind = TimingKind.RRULE
    chosen: frozenset[str] = field(default=frozenset({"skipped", "repeated"}), compare=False)
    _recurrence: Recurrence | None = field(default=None, init=False, repr=False, compare=False)
    _valid: bool = field(default=False, init=False, repr=False, compare=False)

    def validate(self) -> Self:
        """Check and normalise the arguments once; ``InvalidTiming`` names the bad one."""
        if self._valid:
            return self
        recurrence = parse(self.rule)
        object.__setattr__(self, "rule", recurrence.text)
        skipped, repeated, reason = check_wall_clock(
            self.zone, self.skipped, self.repeated, self.reason
        )
        excluded = calendar(self.exclude)
        if not isinstance(self.on_excluded, str) or self.on_excluded not in set(OnExcluded):
            allowed = ", ".join(repr(m.value) for m in OnExcluded)
            raise InvalidTiming(
                "timing.on_excluded", f"must be one of {allowed}, got {self.on_excluded!r}"
            )
        if excluded is None and self.on_excluded != OnExcluded.SKIP:
            raise InvalidTiming(
                "timing.on_excluded", "moves occurrences off excluded dates: give exclude= too"
            )
        if excluded is not None and self.on_excluded != OnExcluded.SKIP:
            _check_moves(recurrence, excluded)
        for name, value in (
            ("skipped", skipped),
            ("repeated", repeated),
            ("reason", reason),
            ("exclude", excluded),
            ("on_excluded", OnExcluded(self.on_excluded)),
            ("_recurrence", recurrence),
            ("_valid", True),
        ):
            object.__setattr__(self, name, value)
        return self

    @property
    def recurrence(self) -> Recurrence:
        """The parsed rule."""
        recurrence = self.validate()._recurrence
        assert recurrence is not None
        return recurrence

    @property
    def calendar(self) -> Calendar | None:
        """The excluded local dates (None: none)."""
        excluded: Calendar | None = self.validate().exclude
        return excluded

    @property
    def local(self) -> bool:
        """Whether this is a business-local schedule (its zone is not UTC)."""
        return not is_utc(self.zone)

    def between(self, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
        self.validate()
        start, end = bounds(start, end)
        return list(self._instants(start, end)) if start < end else []

    def count_between(self, start: dt.datetime, end: dt.datetime) -> int:
        """How many instants ``between`` would list: counted as they are produced, never
        listed. A rule makes at most ``MAX_INSTANTS_PER_DAY`` a day (``Recurrence.per_day``),
        so a day costs at most that many wall times."""
        self.validate()
        start, end = bounds(start, end)
        return sum(1 for _ in self._instants(start, end)) if start < end else 0

    def iter_from(self, start: dt.datetime) -> Iterator[dt.datetime]:
        """Instants from ``start`` on, lazily: one pass of dateutil, however sparse the rule."""
        self.validate()
        return self._instants(ensure_aware_utc(start, name="start"), None)

    def excluded_between(self, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
        """The instants in ``[start, end)`` the calendar takes away without a replacement
        (``on_excluded="skip"``): the planner records each as skipped, reason ``excluded``.
        Empty for the other policies, which move occurrences rather than drop them."""
        self.validate()
        start, end = bounds(start, end)
        if self.calendar is None or self.on_excluded != OnExcluded.SKIP or end <= start:
            return []  # nothing excluded, or every excluded one moved: no walk
        tz = zone(self.zone)
        wall_hi = _wall(end, tz) + WALL_MARGIN
        found: set[dt.datetime] = set()
        for wall in self.recurrence.walls_from(_wall(start, tz) - WALL_MARGIN):
            if wall > wall_hi:
                break
            if self._moved_date(wall.date()) is None:
                found.update(i for i in self._resolve(wall, tz) if start <= i < end)
        return sorted(found)

    def _instants(self, start: dt.datetime, end: dt.datetime | None) -> Iterator[dt.datetime]:
        """The instants in ``[start, end)`` (``end`` None: no end), in order, each once.

        Steps:
        1. walk the rule's wall times from where an instant at ``start`` could come from:
           a DST margin before it, and with ``on_excluded="next"`` the run of excluded dates
           before it, whose occurrences move forward;
        2. move each wall time off an excluded date (or drop it), resolve it to UTC, and
           hold the instants in a heap: moves and DST make them arrive out of order;
        3. release held instants below the floor under which no later wall time can land
           (``_floor``), and stop once that floor passes ``end``.
        """
        tz = zone(self.zone)
        pending: list[dt.datetime] = []
        last = None
        day, moved = None, None  # the date of the last wall time, and where it runs
        landed: set[dt.datetime] = set()  # wall times already moved to ``moved``
        for wall in self.recurrence.walls_from(self._first_wall(_wall(start, tz) - WALL_MARGIN)):
            if wall.date() != day:
                day, target = wall.date(), self._moved_date(wall.date())
                if target != moved:
                    landed.clear()
                moved = target
            if moved is not None:
                # A run of excluded dates moves to one date: the same wall time from each of
                # them is one instant, resolved once.
                moved_wall = dt.datetime.combine(moved, wall.time())
                if moved_wall not in landed:
                    if moved != day:
                        landed.add(moved_wall)
                    for instant in self._resolve(moved_wall, tz):
                        if instant >= start:
                            heapq.heappush(pending, instant)
            floor = self._floor(wall, moved, tz)
            while pending and pending[0] < floor:
                instant = heapq.heappop(pending)
                if end is not None and instant >= end:
                    return
                if instant != last:
                    yield instant
                    last = instant
            if end is not None and floor >= end:
                break
        for instant in sorted(set(pending)):
            if end is not None and instant >= end:
                return
            yield instant

    def _first_wall(self, wall: dt.datetime) -> dt.datetime:
        """Where to start walking wall times for instants from ``wall`` on."""
        excluded = self.calendar
        if excluded is None or self.on_excluded != OnExcluded.NEXT:
            return wall
        day = wall.date()
        for _ in range(MAX_RUN):
            if not excluded.excluded(day - dt.timedelta(days=1)):
                break
            day -= dt.timedelta(days=1)
        return min(wall, dt.datetime.combine(day, dt.time()))

    def _floor(self, wall: dt.datetime, moved: dt.date | None, tz: ZoneInfo) -> dt.datetime:
        """An instant below every instant of the wall times after ``wall``.

        Moves preserve date order: later dates move to dates no earlier than this one's.
        Only ``"previous"`` moves a later date before ``wall``: to ``moved`` at the
        earliest, at any time of day.
        """
        floor_wall = wall
        if self.on_excluded == OnExcluded.PREVIOUS:
            earliest = moved or wall.date() - dt.timedelta(days=MAX_RUN + 1)
            floor_wall = dt.datetime.combine(earliest, dt.time())
        return floor_wall.replace(tzinfo=tz).astimezone(dt.UTC) - WALL_MARGIN

    def _moved_date(self, day: dt.date) -> dt.date | None:
        """The local date an occurrence on ``day`` runs on; None if it does not run."""
        excluded = self.calendar
        if excluded is None or not excluded.excluded(day):
            return day
        if self.on_excluded == OnExcluded.SKIP:
            return None
        step = dt.timedelta(days=1 if self.on_excluded == OnExcluded.NEXT else -1)
        for _ in range(MAX_RUN):
            day += step
            if not excluded.excluded(day):
                return day
        return None  # refused by Calendar.validate(); never reached

    def _resolve(self, wall: dt.datetime, tz: ZoneInfo) -> list[dt.datetime]:
        return resolve(wall, tz, skipped=self.skipped, repeated=self.repeated)

    def record_fields(self) -> dict[str, Any]:
        self.validate()
        excluded = self.calendar
        return {
            "timing_kind": self.kind.value,
            "rrule": self.rule,
            "calendar": {} if excluded is None else excluded.definition(),
            "on_excluded": self.on_excluded.value,
            "cron": "",
            **wall_clock_fields(self.zone, self.skipped, self.repeated, self.reason),
        }

    def created(self, instant: dt.datetime) -> Self:
        return self

    def words(self, *, now: dt.datetime) -> timing_words.TimingWords:
        return timing_words.wall_clock(
            self.describe(),
            timing_words.rule_times(self),
            zone_name=self.zone,
            skipped=self.skipped,
            repeated=self.repeated,
            now=now,
        )

    @classmethod
    def from_record(cls, fields: Any) -> RRule:
        return from_fields(fields)

    @classmethod
    def from_form(cls, data: Mapping[str, Any]) -> RRule:
        """The rule the form gives; its business calendar, which the form does not show, is
        the record's (none for a new one)."""
        definition = data.get("calendar") or {}
        return rrule(
            data["rrule"],
            **wall_clock_arguments(data),
            exclude=Calendar.from_definition(definition) if definition else None,
            on_excluded=data.get("on_excluded") or OnExcluded.SKIP,
        )

    def describe(self) -> str:
        """The rule in words, for the admin and ``jobs inspect``: "monthly on the last weekday
        at 18:00 America/New_York, excluding US holidays, moved to the previous business
        day". Readable, not exhaustive: the rule text is shown beside it."""
        text = recurrence_words.describe(self.recurrence, self.zone)
        if self.calendar is not None:
            text += f", excluding {self.calendar.describe()}{_MOVES[self.on_excluded]}"
        return text


def _check_moves(recurrence: Recurrence, excluded: Calendar) -> None:
    """``InvalidTiming`` (``timing.exclude``) if moving occurrences off ``excluded``'s runs of
    dates makes counting one day walk more than ``MAX_WALLS_PER_DAY`` wall times."""
    per_day, run = recurrence.per_day(), excluded.longest_run()
    walls = per_day * (run + 1)
    if walls > MAX_WALLS_PER_DAY:
        raise InvalidTiming(
            CALENDAR_FIELD,
            f"moving occurrences off {run} consecutive excluded days of a rule of up to "
            f"{per_day:,} instants a day walks up to {walls:,} wall times for one day; at most "
            f"{MAX_WALLS_PER_DAY:,} are allowed: exclude fewer consecutive days (at most "
            f"{MAX_WALLS_PER_DAY // per_day - 1} for this rule), use on_excluded='skip', "
            "or a sparser rule",
        )


def _wall(instant: dt.datetime, tz: ZoneInfo) -> dt.datetime:
    return instant.astimezone(tz).replace(tzinfo=None)


def rrule(
    rule: str,
    *,
    zone: str = "UTC",
    skipped: SkippedTime | str | None = None,
    repeated: RepeatedTime | str | None = None,
    reason: str = "",
    exclude: object = None,
    on_excluded: OnExcluded | str = OnExcluded.SKIP,
) -> RRule:
    """A calendar-rule timing: ``rule`` is an RFC 5545 RRULE such as
    ``"FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=18;BYMINUTE=0"`` (time of day from
    BYHOUR/BYMINUTE/BYSECOND, midnight when absent; a ``DTSTART:`` line sets the phase of an
    INTERVAL, by default 2000-01-01T00:00 local). ``zone``, ``reason``, ``skipped`` and
    ``repeated`` are as for ``cron()``. ``exclude`` names excluded local dates (``Holidays``,
    ``WEEKENDS``, dates, a ``Calendar``, or several); ``on_excluded`` says whether an
    occurrence on one is skipped or runs on the next or previous date that is not."""
    return RRule(
        rule,
        zone,
        SkippedTime.SHIFT if skipped is None else skipped,  # type: ignore[arg-type]
        RepeatedTime.FIRST if repeated is None else repeated,  # type: ignore[arg-type]
        reason,
        exclude,
        on_excluded,  # type: ignore[arg-type]
        chosen=chosen_choices(skipped, repeated),
    )


def from_fields(fields: Any) -> RRule:
    """The rrule timing stored on a ``Schedule`` row (``timings.from_record``)."""
    definition = getattr(fields, "calendar", None) or {}
    return RRule(
        getattr(fields, "rrule", ""),
        fields.time_zone,
        fields.skipped_time,
        fields.repeated_time,
        getattr(fields, "zone_reason", ""),
        Calendar.from_definition(definition) if definition else None,
        getattr(fields, "on_excluded", OnExcluded.SKIP),
    )
