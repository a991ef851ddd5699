"""Business calendars: the local dates on which a calendar rule does not run. Pure: no clock.

A ``Calendar`` combines public holidays (from the ``holidays`` package, by country and
subdivision), weekends, and explicit dates. It is stored on the schedule as a JSON
``definition`` that names its sources, not the dates they produce, so a record stays small and
follows holiday data as the package is updated; the definition records the package version
it was written with, for the audit trail of why a date was or was not a holiday.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from .timing import InvalidTiming

FIELD = "timing.exclude"
# Enough for years of ad-hoc closures; a longer list is a pattern (weekends, holidays), not dates.
MAX_DATES = 1000
# The farthest an excluded occurrence moves to a date that is not excluded (on_excluded=
# "next"/"previous"): a calendar with a longer run of excluded days is refused.
MAX_RUN = 366
FIRST_DATE, LAST_DATE = dt.date(1970, 1, 1), dt.date(2999, 12, 31)
_DEFINITION_KEYS = frozenset({"holidays", "dates", "weekends", "holidays_version"})


# The holidays package is imported where it is first needed: importing it takes longer than
# the rest of the app together, and most processes never evaluate a calendar.


@functools.cache
def _supported() -> dict[str, tuple[str, ...]]:
    """Country code -> its subdivision codes, as the ``holidays`` package lists them."""
    import holidays

    return {
        country: tuple(subdivs) for country, subdivs in holidays.list_supported_countries().items()
    }


@functools.lru_cache(maxsize=4096)
def _holiday_dates(country: str, subdiv: str | None, year: int) -> frozenset[dt.date]:
    """The public holidays (observed days included) of ``country``/``subdiv`` in ``year``."""
    import holidays

    return frozenset(holidays.country_holidays(country, subdiv=subdiv, years=year))


@functools.cache
def holidays_version() -> str:
    """The version of the holiday data: recorded with each stored calendar."""
    from importlib.metadata import version

    return version("holidays")


@dataclass(frozen=True)
class Holidays:
    """The public holidays of a country (ISO 3166-1 alpha-2 code, e.g. ``"US"``), optionally of
    one subdivision (``Holidays("DE", subdiv="BY")`` for Bavaria), with the days the law moves
    them to ("observed" days: a Saturday New Year's Day is a holiday on the Friday before).

    The package's data covers a range of years (for most countries up to 2100); dates outside
    it have no holidays.
    """

    country: str
    subdiv: str | None = None

    def validate(self) -> Self:
        """``InvalidTiming`` naming the country or subdivision the package does not know."""
        known = _supported()
        if not isinstance(self.country, str) or self.country not in known:
            raise InvalidTiming(
                FIELD,
                f"no public holidays are known for country {self.country!r}: give an "
                "ISO 3166-1 alpha-2 code the holidays package supports, for example 'US' or 'DE'",
            )
        subdivs = known[self.country]
        if self.subdiv is not None and (
            not isinstance(self.subdiv, str) or self.subdiv not in subdivs
        ):
            listed = ", ".join(subdivs) if subdivs else "none"
            raise InvalidTiming(
                FIELD,
                f"{self.subdiv!r} is not a subdivision of {self.country} the holidays package "
                f"knows (known: {listed})",
            )
        return self

    def __contains__(self, day: object) -> bool:
        return isinstance(day, dt.date) and day in _holiday_dates(
            self.country, self.subdiv, day.year
        )

    @property
    def name(self) -> str:
        """``US`` or ``DE-BY``: how the admin and ``jobs inspect`` name these holidays."""
        return self.country if self.subdiv is None else f"{self.country}-{self.subdiv}"


def _several(value: Any) -> tuple[Any, ...]:
    """``value`` as a tuple: one entry given alone (``holidays=Holidays("US")``) counts too."""
    if isinstance(value, Iterable) and not isinstance(value, str | bytes | Mapping):
        return tuple(value)
    return (value,)


@dataclass(frozen=True)
class Calendar:
    """Excluded local dates: the union of ``holidays``, explicit ``dates`` and, with
    ``weekends``, every Saturday and Sunday.

    Build one with ``calendar(exclude)`` from what a schedule passes as ``exclude=``; like
    timings, it is checked by ``validate()`` so that ``schedule()`` can report a bad entry
    naming its schedule.
    """

    holidays: tuple[Holidays, ...] = ()
    dates: tuple[dt.date, ...] = ()
    weekends: bool = False
    _dates: frozenset[dt.date] = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Never raises: a bad entry is reported by validate(), naming it.
        object.__setattr__(self, "holidays", _several(self.holidays))
        object.__setattr__(self, "dates", _several(self.dates))
        dates = frozenset(d for d in self.dates if isinstance(d, dt.date))
        object.__setattr__(self, "_dates", dates)

    def validate(self) -> Self:
        """Check every entry, and refuse a calendar that leaves no date to move to."""
        for source in self.holidays:
            if not isinstance(source, Holidays):
                raise InvalidTiming(FIELD, f"expected Holidays(...), got {source!r}")
            source.validate()
        for day in self.dates:
            _check_date(day)
        if len(set(self.dates)) > MAX_DATES:
            raise InvalidTiming(
                FIELD,
                f"at most {MAX_DATES} explicit dates; name recurring closures with holidays "
                "or weekends",
            )
        if not isinstance(self.weekends, bool):
            raise InvalidTiming(FIELD, f"weekends must be True or False, got {self.weekends!r}")
        # One order and no repeats, so that equal calendars compare and store alike.
        object.__setattr__(self, "holidays", tuple(sorted(set(self.holidays), key=_holiday_key)))
        object.__setattr__(self, "dates", tuple(sorted(set(self.dates))))
        object.__setattr__(self, "_dates", frozenset(self.dates))
        self._refuse_long_runs()
        return self

    def _refuse_long_runs(self) -> None:
        """Refuse ``MAX_RUN`` consecutive excluded days (``longest_run``)."""
        length, first = self._longest_run_through(self.dates)
        if length >= MAX_RUN:
            raise InvalidTiming(
                FIELD,
                f"the calendar excludes every day from {first.isoformat()} for "
                f"{MAX_RUN} days or more: there is no business day to run on",
            )

    def longest_run(self) -> int:
        """The most consecutive excluded days (at most ``MAX_RUN``): what an occurrence moved
        off an excluded date (``on_excluded="next"``/``"previous"``) may cross, so what
        evaluating one day of a rule may walk. Runs through explicit dates are walked exactly;
        runs of weekends and public holidays alone are looked for in the years the holiday
        data covers (``HOLIDAY_YEARS``). Computed once per calendar."""
        return _longest_run(self)

    def _longest_run_through(self, starts: Iterable[dt.date]) -> tuple[int, dt.date]:
        """The longest run of excluded days through any of ``starts`` (sorted), at most
        ``MAX_RUN`` long, and its first day: each run walked once."""
        day_ = dt.timedelta(days=1)
        walked_to, longest = dt.date.min, (0, dt.date.min)
        for day in starts:
            if day <= walked_to or not self.excluded(day):
                continue
            first = last = day
            while (last - first).days + 1 < MAX_RUN and self.excluded(first - day_):
                first -= day_
            while (last - first).days + 1 < MAX_RUN and self.excluded(last + day_):
                last += day_
            longest = max(longest, ((last - first).days + 1, first), key=lambda run: run[0])
            walked_to = last
        return longest

    @property
    def empty(self) -> bool:
        return not (self.holidays or self.dates or self.weekends)

    def excluded(self, day: dt.date) -> bool:
        """Whether the local date ``day`` is excluded."""
        return (
            (self.weekends and day.weekday() >= 5)
            or day in self._dates
            or any(day in source for source in self.holidays)
        )

    def definition(self) -> dict[str, Any]:
        """The JSON-able form stored on the schedule record (``Schedule.calendar``)."""
        self.validate()
        definition: dict[str, Any] = {
            "holidays": [{"country": h.country, "subdiv": h.subdiv} for h in self.holidays],
            "dates": [day.isoformat() for day in self.dates],
            "weekends": self.weekends,
        }
        if self.holidays:  # the data the holidays came from: an upgrade is a timing change
            definition["holidays_version"] = holidays_version()
        return definition

    @classmethod
    def from_definition(cls, definition: object) -> Calendar:
        """The calendar a stored ``definition`` describes; ``InvalidTiming`` naming the key
        that is missing or malformed. ``holidays_version`` is informational: holidays are
        those of the installed package."""
        if not isinstance(definition, Mapping):
            raise InvalidTiming(FIELD, f"a calendar definition is an object, got {definition!r}")
        unknown = sorted(set(map(str, definition)) - _DEFINITION_KEYS)
        if unknown:
            raise _malformed(unknown[0], "is not a key of a calendar definition")
        missing = sorted(_DEFINITION_KEYS - {"holidays_version"} - set(definition))
        if missing:
            raise _malformed(missing[0], "is missing")
        version = definition.get("holidays_version", "")
        if not isinstance(version, str):
            raise _malformed("holidays_version", f"must be text, got {version!r}")
        return cls(
            holidays=_holidays_from(definition["holidays"]),
            dates=_dates_from(definition["dates"]),
            weekends=_weekends_from(definition["weekends"]),
        ).validate()

    def describe(self) -> str:
        """``US holidays, weekends and 2 other dates``: the calendar in words."""
        parts = [f"{h.name} holidays" for h in self.holidays]
        if self.weekends:
            parts.append("weekends")
        if len(self.dates) == 1:
            parts.append(("one other date " if parts else "") + self.dates[0].isoformat())
        elif self.dates:
            parts.append(f"{len(self.dates)}{' other' if parts else ''} dates")
        if len(parts) == 1:
            return parts[0]
        return ", ".join(parts[:-1]) + " and " + parts[-1]


# The years whose public holidays ``Calendar.longest_run`` looks through: the holidays
# package's data covers up to 2100 for most countries, and a year of holidays costs well under
# a millisecond to list.
HOLIDAY_YEARS = range(FIRST_DATE.year, 2101)


@functools.lru_cache(maxsize=1024)
def _longest_run(excluded: Calendar) -> int:
    """``Calendar.longest_run``: cached, as planning reads the same calendars every pass."""
    starts: set[dt.date] = set(excluded.dates)
    for source in excluded.holidays:
        for year in HOLIDAY_YEARS:
            starts.update(_holiday_dates(source.country, source.subdiv, year))
    if excluded.weekends:  # weekends alone: two days; a run longer than that has a holiday
        starts.add(dt.date(1970, 1, 3))  # a Saturday
    return max(2 if excluded.weekends else 0, excluded._longest_run_through(sorted(starts))[0])


WEEKENDS = Calendar(weekends=True)
"""Every Saturday and Sunday."""


def calendar(exclude: object) -> Calendar | None:
    """The calendar for what a schedule passes as ``exclude=``: a ``Holidays``, ``WEEKENDS``,
    a ``datetime.date``, a ``Calendar``, or an iterable of these. ``None`` (and an empty
    calendar) means no exclusions."""
    if exclude is None:
        return None
    holidays: list[Holidays] = []
    dates: list[dt.date] = []
    weekends = False
    for count, entry in enumerate(_entries(exclude, depth=0)):
        if count >= MAX_DATES:
            raise InvalidTiming(FIELD, f"at most {MAX_DATES} entries")
        if isinstance(entry, Holidays):
            holidays.append(entry)
        elif isinstance(entry, Calendar):
            holidays.extend(entry.holidays)
            dates.extend(entry.dates)
            weekends = weekends or entry.weekends
        else:
            dates.append(_check_date(entry))
    combined = Calendar(tuple(holidays), tuple(dates), weekends).validate()
    return None if combined.empty else combined


def _entries(exclude: object, *, depth: int) -> Iterable[object]:
    """The entries of ``exclude``, flattening nested iterables (not text: a string is not a
    date)."""
    if isinstance(exclude, Holidays | Calendar | dt.date | str | bytes) or depth > 2:
        yield exclude
        return
    if not isinstance(exclude, Iterable):
        yield exclude
        return
    for entry in exclude:
        yield from _entries(entry, depth=depth + 1)


def _check_date(day: object) -> dt.date:
    # A datetime is a date to Python, but a point in time to a reader: refused, not truncated.
    if not isinstance(day, dt.date) or isinstance(day, dt.datetime):
        raise InvalidTiming(
            FIELD,
            f"expected Holidays(...), WEEKENDS, a Calendar or a datetime.date, got {day!r}",
        )
    if not FIRST_DATE <= day <= LAST_DATE:
        raise InvalidTiming(
            FIELD, f"dates are from {FIRST_DATE} to {LAST_DATE}, got {day.isoformat()}"
        )
    return day


def _holiday_key(source: Holidays) -> tuple[str, str]:
    return source.country, source.subdiv or ""


def _malformed(key: str, problem: str) -> InvalidTiming:
    return InvalidTiming(FIELD, f"calendar definition: {key!r} {problem}")


def _holidays_from(value: object) -> tuple[Holidays, ...]:
    if not isinstance(value, list):
        raise _malformed("holidays", f"must be a list, got {value!r}")
    found = []
    for entry in value:
        if not isinstance(entry, Mapping) or set(entry) != {"country", "subdiv"}:
            raise _malformed("holidays", f"entries are {{country, subdiv}}, got {entry!r}")
        found.append(Holidays(entry["country"], entry["subdiv"]))
    return tuple(found)


def _dates_from(value: object) -> tuple[dt.date, ...]:
    if not isinstance(value, list) or len(value) > MAX_DATES:
        raise _malformed("dates", f"must be a list of at most {MAX_DATES} ISO dates")
    found = []
    for text in value:
        try:
            if not isinstance(text, str) or len(text) != 10:
                raise ValueError
            found.append(dt.date.fromisoformat(text))
        except ValueError:
            raise _malformed("dates", f"holds {text!r}, not an ISO date (YYYY-MM-DD)") from None
    return tuple(found)


def _weekends_from(value: object) -> bool:
    if not isinstance(value, bool):
        raise _malformed("weekends", f"must be true or false, got {value!r}")
    return value
