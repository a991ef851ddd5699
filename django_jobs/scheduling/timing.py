"""What every timing is: the ``Timing`` protocol, the registry of timing kinds, the error
naming a bad argument, the window every evaluation checks, the window of instants anything
may name (``check_instant``), and the ``Schedule`` record columns a timing writes.

A timing kind is one class that answers the protocol (whether it is wall-clock time, a
one-off, its zone, its words, its record columns, how a record and the console's form make
one) and registers itself (``register``) under its ``kind``: the rest of the app asks the
protocol or the registry, never ``isinstance`` or a kind's name.

Pure: no clock, no database. The timings themselves live in ``crons``, ``rrules`` and
``elapsed``; ``timings`` imports them all (so each is registered) and reads them back from a
record.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self, TypeVar

from ..clock import ensure_aware_utc
from .policies import RepeatedTime, SkippedTime

if TYPE_CHECKING:
    from .timing_words import TimingWords


class InvalidTiming(ValueError):
    """A timing argument is invalid; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# The most wall times a calendar timing (``cron``, ``rrule``, with or without a business
# calendar) may produce on one local date: cron's densest, one a minute. Those timings are
# evaluated by walking their wall times, so a denser rule (an rrule every second: 86,400 a
# day) would make one plan decision walk millions of them. Counted from the rule's fields,
# never by walking; ``every()`` is counted by arithmetic and has its own bounds.
MAX_INSTANTS_PER_DAY = 24 * 60


def check_density(field: str, per_day: int, counted: str) -> None:
    """``InvalidTiming`` naming ``field`` if ``per_day`` (``counted``: how) is over the bound."""
    if per_day > MAX_INSTANTS_PER_DAY:
        raise InvalidTiming(
            field,
            f"produces up to {per_day:,} instants a day ({counted}); at most "
            f"{MAX_INSTANTS_PER_DAY:,} a day (one a minute, as cron's densest) are allowed",
        )


# The instants a timing, an ``enqueue(at=)`` or a replay may name: from the Unix epoch (the
# default anchor of ``every``) up to, not including, the start of 2200, UTC. Absolute, as
# scheduling reads no clock: ``after()``'s longest delay (a century) from any instant before
# 2100 lands inside. Everything a worker adds to an instant (a lease, a timeout, a backoff,
# ``max_delay``: each at most a century) or a page subtracts (a zone's offset) then stays
# thousands of years short of ``datetime.max``, and never reaches ``datetime.min``.
EARLIEST_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
END_OF_INSTANTS = datetime(2200, 1, 1, tzinfo=UTC)
INSTANT_WINDOW = f"from {EARLIEST_INSTANT:%Y-%m-%d} to before {END_OF_INSTANTS:%Y-%m-%d} UTC"


def instant_problem(value: object) -> str | None:
    """What is wrong with ``value`` as an instant to schedule at, or None: it must be an
    aware ``datetime`` inside the window (``EARLIEST_INSTANT`` to before
    ``END_OF_INSTANTS``)."""
    if not isinstance(value, datetime):
        return f"must be an aware datetime, got {type(value).__name__}"
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        return f"must be an aware datetime, got naive {value.isoformat()}"
    try:
        inside = EARLIEST_INSTANT <= value < END_OF_INSTANTS
    except OverflowError:  # year 1 east of UTC, year 9999 west of it: not even in UTC
        inside = False
    if not inside:
        return f"must be {INSTANT_WINDOW}, got {value.isoformat()}"
    return None


def check_instant(field: str, value: object) -> datetime:
    """``value`` as an aware UTC instant inside the window, or ``InvalidTiming`` naming
    ``field``. Every entry point asks this: the timings' ``validate()`` (so declarations,
    the console's form, ``upsert_schedule``, ``jobs sync`` and the planner reading a row),
    ``enqueue()``, and a replay of an instant."""
    problem = instant_problem(value)
    if problem is not None:
        raise InvalidTiming(field, problem)
    assert isinstance(value, datetime)
    return value.astimezone(UTC)


class Timing(Protocol):
    """What a timing kind is (``Cron``, ``RRule``, ``Every``, ``At``, ``After``): what the
    planner asks of any timing, and what the rest of the app asks of its kind.

    The class attributes say what the kind is, for a timing and for a record of its kind
    (``timings.kind_of``): ``wall_clock``, evaluated as wall-clock time in its ``zone``
    (``cron``, ``rrule``) rather than elapsed time in UTC; ``one_off``, one instant, then
    done (``at``, ``after``); ``fixed_instant``, a one-off whose instant is given rather than
    counted from its record's creation, so it may come before the record exists, where no
    plan pass starts (``at``; ``planner.plan_unreached``); ``form_fields``, the record
    columns the console's form fills for it, the first of them needed.
    """

    wall_clock: ClassVar[bool]
    one_off: ClassVar[bool]
    fixed_instant: ClassVar[bool]
    form_fields: ClassVar[tuple[str, ...]]

    @property
    def kind(self) -> str: ...

    @property
    def zone(self) -> str:
        """The IANA zone its wall-clock times are in ("UTC" for elapsed-time kinds)."""
        ...

    @property
    def local(self) -> bool:
        """Whether it is a business-local schedule (wall-clock time in a zone not UTC)."""
        ...

    @property
    def reason(self) -> str:
        """Why a business-local schedule is not UTC ("" when not given, or not wall-clock)."""
        ...

    @property
    def chosen(self) -> frozenset[str]:
        """Which DST choices (``"skipped"``, ``"repeated"``) its maker was given explicitly."""
        ...

    def validate(self) -> Self: ...

    def between(self, start: datetime, end: datetime) -> list[datetime]: ...

    def count_between(self, start: datetime, end: datetime) -> int: ...

    def iter_from(self, start: datetime) -> Iterator[datetime]: ...

    def record_fields(self) -> dict[str, Any]: ...

    def created(self, instant: datetime) -> Self:
        """This timing for a record created at ``instant`` (``after`` counts from it)."""
        ...

    def words(self, *, now: datetime) -> TimingWords:
        """In words (``timing_words``), its zone read for the year after ``now``."""
        ...

    @classmethod
    def from_record(cls, fields: Any) -> Timing:
        """The timing stored on a ``Schedule`` row (or anything with its attributes),
        unvalidated."""
        ...

    @classmethod
    def from_form(cls, data: Mapping[str, Any]) -> Timing:
        """The timing the console's form gives: ``data`` holds the record's columns as the
        form cleaned them (a blank choice is ``""``), and the record's own for the columns
        the form does not show."""
        ...


_Kind = TypeVar("_Kind", bound=type[Timing])
_KINDS: dict[str, type[Timing]] = {}


def register(cls: _Kind) -> _Kind:
    """Register the timing class ``cls`` under its ``kind`` (a class decorator): records of
    that kind are read back with ``cls.from_record``, and the console's form offers it."""
    kind = str(inspect.getattr_static(cls, "kind"))  # the class's (a dataclass default)
    if _KINDS.get(kind, cls) is not cls:
        raise ValueError(f"the timing kind {kind!r} is registered already: {_KINDS[kind]!r}")
    _KINDS[kind] = cls
    _WHERE.clear()
    return cls


def unregister(kind: str) -> None:
    """Forget the timing kind ``kind`` (for tests that register a kind of their own)."""
    _KINDS.pop(kind, None)
    _WHERE.clear()


# The kinds whose class says yes to an attribute (``one_off``, ``fixed_instant``), asked for
# each record a service decides: kept until the registry changes.
_WHERE: dict[str, frozenset[str]] = {}


def kinds_where(attribute: str) -> frozenset[str]:
    """The registered kinds whose class's ``attribute`` is true; worked out once until
    ``register`` or ``unregister`` changes the registry."""
    found = _WHERE.get(attribute)
    if found is None:
        found = frozenset(k for k, cls in _KINDS.items() if getattr(cls, attribute))
        _WHERE[attribute] = found
    return found


def registered() -> dict[str, type[Timing]]:
    """Every registered timing kind, by name, in the order they were registered."""
    return dict(_KINDS)


def bounds(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """``start`` and ``end`` as aware UTC instants (a ``ValueError`` naming a naive one)."""
    return ensure_aware_utc(start, name="start"), ensure_aware_utc(end, name="end")


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


def no_rule_fields() -> dict[str, Any]:
    """The calendar-rule columns of a timing that is not an ``rrule``: a schedule changed
    from one timing to another keeps no rule behind."""
    return {"rrule": "", "calendar": {}, "on_excluded": "skip"}


def one_off_fields() -> dict[str, Any]:
    """The record columns of a one-off timing (``at``, ``after``) before its own: UTC, no
    rule, no interval, no instant yet."""
    return {
        **no_rule_fields(),
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
