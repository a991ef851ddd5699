"""The four timings: ``cron``, ``every``, ``at`` and ``after``. Pure: no clock, no database.

Every timing answers ``between(start, end)``: the aware UTC instants in ``[start, end)`` at which
it plans occurrences, in order, after its skipped/repeated rules; and ``iter_from(start)``: the
same, lazily, from ``start`` on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, Self
from zoneinfo import ZoneInfo

from ..clock import ensure_aware_utc
from . import cron as cronlib
from .policies import MAX_DURATION, RepeatedTime, SkippedTime, TimingKind
from .zones import gap_end, resolve, zone

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_REASON = 500

# Zone names that are UTC under another name: a schedule in one of them is not business-local.
UTC_NAMES = frozenset(
    {
        "UTC",
        "Etc/UTC",
        "Etc/UCT",
        "UCT",
        "Etc/Universal",
        "Universal",
        "Etc/Zulu",
        "Zulu",
        "GMT",
        "Etc/GMT",
        "Etc/GMT+0",
        "Etc/GMT-0",
        "Etc/GMT0",
        "GMT+0",
        "GMT-0",
        "GMT0",
        "Etc/Greenwich",
        "Greenwich",
    }
)


def is_utc(zone_name: str) -> bool:
    """Whether ``zone_name`` is UTC (by any of its names)."""
    return zone_name in UTC_NAMES


# A local time that falls back can map to an instant up to this far from the wall time read at
# a window's edge (the largest DST shift in tzdata since 1970 is 2 hours).
WALL_MARGIN = timedelta(hours=3)
_FIRST_WINDOW = timedelta(hours=1)
_MAX_WINDOW = timedelta(days=31)
_HORIZON = timedelta(days=366 * 30)
_SAMPLE = timedelta(minutes=30)
# How often a long span is sampled for offset changes (no zone changes its offset twice
# within 12 hours).
_COUNT_SAMPLE = timedelta(hours=12)


class InvalidTiming(ValueError):
    """A timing argument is invalid; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class Timing(Protocol):
    @property
    def kind(self) -> TimingKind: ...

    def validate(self) -> Self: ...

    def between(self, start: datetime, end: datetime) -> list[datetime]: ...

    def count_between(self, start: datetime, end: datetime) -> int: ...

    def iter_from(self, start: datetime) -> Iterator[datetime]: ...

    def record_fields(self) -> dict[str, Any]: ...


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


def _offset_transitions(
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


def check_wall_clock(
    zone_name: str, skipped: str, repeated: str, reason: str
) -> tuple[SkippedTime, RepeatedTime, str]:
    """The checked zone, DST policies and reason of a timing evaluated as wall-clock time
    (``cron``, ``rrule``): ``InvalidTiming`` names the first bad one."""
    try:
        zone(zone_name)
    except ValueError as exc:
        raise InvalidTiming("timing.zone", str(exc)) from None
    for name, policy, value in (
        ("timing.skipped", SkippedTime, skipped),
        ("timing.repeated", RepeatedTime, repeated),
    ):
        if value not in set(policy):
            allowed = ", ".join(repr(m.value) for m in policy)
            raise InvalidTiming(name, f"must be one of {allowed}, got {value!r}")
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise InvalidTiming("timing.reason", f"must be text of at most {MAX_REASON} characters")
    return SkippedTime(skipped), RepeatedTime(repeated), reason.strip()


def chosen_choices(skipped: object, repeated: object) -> frozenset[str]:
    """Which DST choices a caller gave explicitly (``None`` is not a choice)."""
    return frozenset(
        name for name, value in (("skipped", skipped), ("repeated", repeated)) if value is not None
    )


def bounds(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """``start`` and ``end`` as aware UTC instants (a ``ValueError`` naming a naive one)."""
    return ensure_aware_utc(start, name="start"), ensure_aware_utc(end, name="end")


@dataclass(frozen=True)
class Cron:
    """A five-field cron expression, evaluated as wall-clock time in ``zone``.

    Like every timing, it is validated on first use (``validate()``), so that ``schedule()``
    can report a bad argument naming the schedule it belongs to.
    """

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
        object.__setattr__(self, "skipped", skipped)
        object.__setattr__(self, "repeated", repeated)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "_valid", True)
        return self

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
        margin = (
            WALL_MARGIN
            if _offset_changes(tz, start - WALL_MARGIN, end + WALL_MARGIN)
            else timedelta(0)
        )
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
        the skipped/repeated rules count exactly as they run.
        """
        self.validate()
        start, end = bounds(start, end)
        if end <= start:
            return 0
        tz = zone(self.zone)
        listed: list[tuple[datetime, datetime]] = []
        for instant, change in _offset_transitions(tz, start, end):
            lo, hi = (
                max(start, instant - change - WALL_MARGIN),
                min(end, instant + change + WALL_MARGIN),
            )
            if listed and lo <= listed[-1][1]:
                lo = listed.pop()[0]
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
            **_no_rule(),
        }


@dataclass(frozen=True)
class Every:
    """Every ``interval`` of elapsed time from ``anchor`` (default: the Unix epoch, UTC).

    Anchored, so it never drifts: ``every(timedelta(minutes=5))`` runs at :00, :05, :10, ...
    whenever the worker happens to plan. Zones do not apply to elapsed time.
    """

    interval: timedelta
    anchor: datetime = EPOCH
    kind: TimingKind = TimingKind.INTERVAL
    _valid: bool = field(default=False, init=False, repr=False, compare=False)

    def validate(self) -> Self:
        if self._valid:
            return self
        if not isinstance(self.interval, timedelta) or self.interval <= timedelta(0):
            raise InvalidTiming(
                "timing.interval", f"must be a positive timedelta, got {self.interval!r}"
            )
        if self.interval < timedelta(seconds=1):
            raise InvalidTiming("timing.interval", f"must be 1 second or more, got {self.interval}")
        if self.interval > MAX_DURATION:
            raise InvalidTiming(
                "timing.interval", f"must be at most {MAX_DURATION.days} days, got {self.interval}"
            )
        try:
            object.__setattr__(self, "anchor", ensure_aware_utc(self.anchor, name="anchor"))
        except (ValueError, AttributeError) as exc:
            raise InvalidTiming("timing.anchor", str(exc)) from None
        object.__setattr__(self, "_valid", True)
        return self

    def index_at_or_after(self, instant: datetime) -> int:
        """The index ``k`` of the first instant ``anchor + k * interval >= instant``."""
        return -((self.anchor - instant) // self.interval)  # ceil((instant - anchor) / interval)

    def count_between(self, start: datetime, end: datetime) -> int:
        """How many instants fall in ``[start, end)``, without listing them."""
        return max(0, self.index_at_or_after(end) - self.index_at_or_after(start))

    def between(self, start: datetime, end: datetime) -> list[datetime]:
        self.validate()
        start, end = bounds(start, end)
        found = []
        index = self.index_at_or_after(start)
        while (instant := self.anchor + self.interval * index) < end:
            found.append(instant)
            index += 1
        return found

    def iter_from(self, start: datetime) -> Iterator[datetime]:
        index = self.validate().index_at_or_after(ensure_aware_utc(start, name="start"))
        while True:
            try:
                yield self.anchor + self.interval * index
            except OverflowError:
                return
            index += 1

    def record_fields(self) -> dict[str, Any]:
        self.validate()
        return {
            "timing_kind": self.kind.value,
            "cron": "",
            "time_zone": "UTC",
            "skipped_time": SkippedTime.SHIFT.value,
            "repeated_time": RepeatedTime.FIRST.value,
            "zone_reason": "",
            **_no_rule(),
            "interval": self.interval,
            "anchor": self.anchor,
            "run_at": None,
            "delay": None,
        }


@dataclass(frozen=True)
class At:
    """Once, at one aware instant."""

    instant: datetime
    kind: TimingKind = TimingKind.AT
    _valid: bool = field(default=False, init=False, repr=False, compare=False)

    def validate(self) -> Self:
        if self._valid:
            return self
        try:
            object.__setattr__(self, "instant", ensure_aware_utc(self.instant, name="instant"))
        except (ValueError, AttributeError) as exc:
            raise InvalidTiming("timing.at", str(exc)) from None
        object.__setattr__(self, "_valid", True)
        return self

    def between(self, start: datetime, end: datetime) -> list[datetime]:
        self.validate()
        start, end = bounds(start, end)
        return [self.instant] if start <= self.instant < end else []

    def count_between(self, start: datetime, end: datetime) -> int:
        return len(self.between(start, end))

    def iter_from(self, start: datetime) -> Iterator[datetime]:
        if self.validate().instant >= ensure_aware_utc(start, name="start"):
            yield self.instant

    def record_fields(self) -> dict[str, Any]:
        self.validate()
        return {**_one_off_fields(), "timing_kind": self.kind.value, "run_at": self.instant}


@dataclass(frozen=True)
class After:
    """Once, ``delay`` after the schedule record is created (``created_at``, set on creation)."""

    delay: timedelta
    created_at: datetime | None = None
    kind: TimingKind = TimingKind.AFTER
    _valid: bool = field(default=False, init=False, repr=False, compare=False)

    def validate(self) -> Self:
        if self._valid:
            return self
        if not isinstance(self.delay, timedelta) or not timedelta(0) <= self.delay <= MAX_DURATION:
            raise InvalidTiming(
                "timing.after",
                f"must be a timedelta of 0 or more, at most {MAX_DURATION.days} days, "
                f"got {self.delay!r}",
            )
        if self.created_at is not None:
            object.__setattr__(
                self, "created_at", ensure_aware_utc(self.created_at, name="created_at")
            )
        object.__setattr__(self, "_valid", True)
        return self

    def created(self, instant: datetime) -> After:
        """This timing for a record created at ``instant``."""
        return After(self.delay, created_at=instant)

    @property
    def instant(self) -> datetime:
        self.validate()
        if self.created_at is None:
            raise ValueError("after(): the record's creation instant is not known yet")
        return self.created_at + self.delay

    def between(self, start: datetime, end: datetime) -> list[datetime]:
        return At(self.instant).between(start, end)

    def count_between(self, start: datetime, end: datetime) -> int:
        return len(self.between(start, end))

    def iter_from(self, start: datetime) -> Iterator[datetime]:
        return At(self.instant).iter_from(start)

    def record_fields(self) -> dict[str, Any]:
        self.validate()
        fields = {**_one_off_fields(), "timing_kind": self.kind.value, "delay": self.delay}
        if self.created_at is not None:
            fields["run_at"] = self.instant
        return fields


def wall_clock_fields(
    zone: str, skipped: SkippedTime, repeated: RepeatedTime, reason: str
) -> dict[str, Any]:
    """The record columns of a wall-clock timing (``cron``, ``rrule``): its zone, DST choices
    and reason, and no elapsed-time or one-off columns."""
    return {
        "time_zone": zone,
        "skipped_time": skipped.value,
        "repeated_time": repeated.value,
        "zone_reason": reason,
        "interval": None,
        "anchor": None,
        "run_at": None,
        "delay": None,
    }


def _no_rule() -> dict[str, Any]:
    """The calendar-rule columns of a timing that is not an ``rrule``: a schedule changed
    from one timing to another keeps no rule behind."""
    return {"rrule": "", "calendar": {}, "on_excluded": "skip"}


def _one_off_fields() -> dict[str, Any]:
    return {
        **_no_rule(),
        "cron": "",
        "time_zone": "UTC",
        "skipped_time": SkippedTime.SHIFT.value,
        "repeated_time": RepeatedTime.FIRST.value,
        "zone_reason": "",
        "interval": None,
        "anchor": None,
        "run_at": None,
        "delay": None,
    }


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


def every(interval: timedelta, *, anchor: datetime = EPOCH) -> Every:
    return Every(interval, anchor)


def at(instant: datetime) -> At:
    return At(instant)


def after(delay: timedelta) -> After:
    return After(delay)


def from_record(fields: Any) -> Timing:
    """The timing stored on a ``Schedule`` row (or any object with the same attributes)."""
    kind = fields.timing_kind
    timing: Timing
    if kind == TimingKind.CRON:
        timing = Cron(
            fields.cron,
            fields.time_zone,
            fields.skipped_time,
            fields.repeated_time,
            getattr(fields, "zone_reason", ""),
        )
    elif kind == TimingKind.INTERVAL:
        timing = Every(fields.interval, fields.anchor or EPOCH)
    elif kind == TimingKind.AT:
        timing = At(fields.run_at)
    elif kind == TimingKind.AFTER:
        timing = After(fields.delay, created_at=fields.run_at - fields.delay)
    elif kind == TimingKind.RRULE:
        # Imported here: rrules builds on this module.
        from .rrules import from_fields

        timing = from_fields(fields)
    else:
        raise InvalidTiming("timing_kind", f"unknown timing kind {kind!r}")
    return timing.validate()


def produces(timing: Timing, instant: datetime) -> bool:
    """Whether ``instant`` is one of the timing's instants."""
    instant = ensure_aware_utc(instant, name="instant")
    return next(iter(timing.iter_from(instant)), None) == instant


_NEIGHBOUR_WINDOWS = [timedelta(minutes=1) * 8**n for n in range(9)]  # 1 minute to 32 years


def neighbours(timing: Timing, instant: datetime) -> tuple[datetime | None, datetime | None]:
    """The timing's last instant before ``instant`` and its first after it (None where there
    is none). Looks back in growing windows, so a frequent timing lists few instants."""
    instant = ensure_aware_utc(instant, name="instant")
    following = next(iter(timing.iter_from(instant + timedelta(microseconds=1))), None)
    for window in _NEIGHBOUR_WINDOWS:
        try:
            earlier = timing.between(instant - window, instant)
        except OverflowError:
            break
        if earlier:
            return earlier[-1], following
    return None, following
