"""The timings of elapsed time, where zones do not apply: ``every`` (an anchored interval),
``at`` (one instant) and ``after`` (one delay after the record is created).
Pure: no clock, no database.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Self

from ..clock import ensure_aware_utc
from .policies import MAX_DURATION, RepeatedTime, SkippedTime, TimingKind
from .timing import (
    InvalidTiming,
    bounds,
    check_instant,
    no_rule_fields,
    one_off_fields,
    register,
)
from .timing_words import TimingWords, duration

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # the earliest instant a timing may name


class _Elapsed:
    """What the elapsed-time timings share: zones do not apply."""

    wall_clock: ClassVar[bool] = False
    zone: ClassVar[str] = "UTC"
    local: ClassVar[bool] = False
    reason: ClassVar[str] = ""
    chosen: ClassVar[frozenset[str]] = frozenset()


def _utc(instant: datetime) -> str:
    return f"{instant:%Y-%m-%d %H:%M:%S} UTC"


@register
@dataclass(frozen=True)
class Every(_Elapsed):
    """Every ``interval`` of elapsed time from ``anchor`` (default: the Unix epoch, UTC).

    Anchored, so it never drifts: ``every(timedelta(minutes=5))`` runs at :00, :05, :10, ...
    whenever the worker happens to plan. Zones do not apply to elapsed time.
    """

    one_off: ClassVar[bool] = False
    fixed_instant: ClassVar[bool] = False
    form_fields: ClassVar[tuple[str, ...]] = ("interval", "anchor")

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
        object.__setattr__(self, "anchor", check_instant("timing.anchor", self.anchor))
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
            **no_rule_fields(),
            "interval": self.interval,
            "anchor": self.anchor,
            "run_at": None,
            "delay": None,
        }

    def created(self, instant: datetime) -> Self:
        return self

    def words(self, *, now: datetime) -> TimingWords:
        return TimingWords(
            f"every {duration(self.interval)} of elapsed time, counted from {_utc(self.anchor)}",
            "UTC: zones and DST do not apply",
        )

    @classmethod
    def from_record(cls, fields: Any) -> Every:
        return cls(fields.interval, fields.anchor or EPOCH)

    @classmethod
    def from_form(cls, data: Mapping[str, Any]) -> Every:
        return every(data["interval"], anchor=data["anchor"] or EPOCH)


@register
@dataclass(frozen=True)
class At(_Elapsed):
    """Once, at one aware instant."""

    one_off: ClassVar[bool] = True
    fixed_instant: ClassVar[bool] = True
    form_fields: ClassVar[tuple[str, ...]] = ("run_at",)

    instant: datetime
    kind: TimingKind = TimingKind.AT
    _valid: bool = field(default=False, init=False, repr=False, compare=False)

    def validate(self) -> Self:
        if self._valid:
            return self
        object.__setattr__(self, "instant", check_instant("timing.at", self.instant))
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
        return {**one_off_fields(), "timing_kind": self.kind.value, "run_at": self.instant}

    def created(self, instant: datetime) -> Self:
        return self

    def words(self, *, now: datetime) -> TimingWords:
        return TimingWords(f"once, at {_utc(self.instant)}", "")

    @classmethod
    def from_record(cls, fields: Any) -> At:
        return cls(fields.run_at)

    @classmethod
    def from_form(cls, data: Mapping[str, Any]) -> At:
        return at(data["run_at"])


@register
@dataclass(frozen=True)
class After(_Elapsed):
    """Once, ``delay`` after the schedule record is created (``created_at``, set on creation)."""

    one_off: ClassVar[bool] = True
    fixed_instant: ClassVar[bool] = False
    form_fields: ClassVar[tuple[str, ...]] = ("delay",)

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
            created = ensure_aware_utc(self.created_at, name="created_at")
            try:
                check_instant("timing.after", created + self.delay)
            except OverflowError:  # a record created at the end of the calendar
                raise InvalidTiming(
                    "timing.after", f"{self.delay} after {created.isoformat()} is past year 9999"
                ) from None
            object.__setattr__(self, "created_at", created)
        object.__setattr__(self, "_valid", True)
        return self

    def created(self, instant: datetime) -> Self:
        """This timing for a record created at ``instant``: its instant is ``delay`` after."""
        return replace(self, created_at=instant)

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
        fields = {**one_off_fields(), "timing_kind": self.kind.value, "delay": self.delay}
        if self.created_at is not None:
            fields["run_at"] = self.instant
        return fields

    def words(self, *, now: datetime) -> TimingWords:
        when = f"once, {duration(self.delay)} after the record was created"
        if self.created_at is not None:
            when += f": at {_utc(self.instant)}"
        return TimingWords(when, "")

    @classmethod
    def from_record(cls, fields: Any) -> After:
        return cls(fields.delay, created_at=fields.run_at - fields.delay)

    @classmethod
    def from_form(cls, data: Mapping[str, Any]) -> After:
        return after(data["delay"])


def every(
    interval: timedelta | None = None,
    *,
    anchor: datetime = EPOCH,
    days: float = 0,
    hours: float = 0,
    minutes: float = 0,
    seconds: float = 0,
) -> Every:
    """Every ``interval`` of elapsed time from ``anchor`` (default: the Unix epoch, UTC):
    a ``timedelta``, or given as ``every(minutes=5)`` (``days``, ``hours``, ``minutes``,
    ``seconds``)."""
    parts = {"days": days, "hours": hours, "minutes": minutes, "seconds": seconds}
    named = {name: value for name, value in parts.items() if value}
    if interval is not None and named:
        raise InvalidTiming(
            "timing.interval",
            f"give every() a timedelta or {', '.join(f'{n}=' for n in named)}, not both",
        )
    if interval is None:
        if not named:
            raise InvalidTiming(
                "timing.interval", "say how often: every(minutes=5) or every(timedelta(...))"
            )
        interval = timedelta(**named)
    return Every(interval, anchor)


def at(instant: datetime) -> At:
    """Once, at the aware ``instant``."""
    return At(instant)


def after(delay: timedelta) -> After:
    """Once, ``delay`` after the schedule record is created."""
    return After(delay)
