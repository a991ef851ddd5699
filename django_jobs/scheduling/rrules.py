"""The ``rrule`` timing: an iCalendar (RFC 5545) recurrence rule, with a business calendar.
Pure: no clock, no database.

Like ``cron``, a rule is evaluated as naive wall-clock time (python-dateutil, no tzinfo), and
``zones.resolve`` turns each wall time into UTC instants under the schedule's skipped and
repeated rules. A ``Calendar`` excludes local dates: an occurrence on one is skipped, or moved
to the next or previous date that is not excluded, at the same wall time (``OnExcluded``).

dateutil iterates from DTSTART, so every evaluation first moves DTSTART forward by whole
periods of FREQ x INTERVAL to just before the window (``Recurrence.walls_from``): evaluating
2030 does not walk from 2000.
"""

from __future__ import annotations

import datetime as dt
import functools
import heapq
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Self
from zoneinfo import ZoneInfo

from dateutil.rrule import rrulestr

from ..clock import ensure_aware_utc
from .calendars import MAX_RUN, Calendar, calendar
from .policies import OnExcluded, RepeatedTime, SkippedTime, TimingKind
from .timings import (
    WALL_MARGIN,
    InvalidTiming,
    bounds,
    check_wall_clock,
    chosen_choices,
    is_utc,
    wall_clock_fields,
)
from .zones import resolve, zone

FIELD = "timing.rrule"
MAX_LENGTH = 500  # the width of Schedule.rrule
DEFAULT_DTSTART = dt.datetime(2000, 1, 1)  # noqa: DTZ001 (a wall time: naive on purpose)
FREQUENCIES = ("YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY")
# INTERVAL is at most a century of periods, like every other duration a schedule names.
MAX_INTERVAL = {"YEARLY": 100, "MONTHLY": 1200, "WEEKLY": 5217, "DAILY": 36525, "HOURLY": 876600}
WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
# Integer-list parts: (lowest, highest, whether negative values count from the end).
INTEGER_PARTS = {
    "BYMONTH": (1, 12, False),
    "BYMONTHDAY": (1, 31, True),
    "BYYEARDAY": (1, 366, True),
    "BYWEEKNO": (1, 53, True),
    "BYHOUR": (0, 23, False),
    "BYMINUTE": (0, 59, False),
    "BYSECOND": (0, 59, False),
    "BYSETPOS": (1, 366, True),
}
PARTS = frozenset({"FREQ", "INTERVAL", "UNTIL", "WKST", "BYDAY", *INTEGER_PARTS})
REFUSED_PARTS = {
    "COUNT": "COUNT counts occurrences from DTSTART, which a schedule does not run from; "
    "end the rule with UNTIL=<local date-time> instead",
    "BYEASTER": "BYEASTER is not part of RFC 5545",
}
_LOCAL_DATE_TIME = re.compile(r"\d{8}T\d{6}")
_BYDAY = re.compile(r"([+-]?)(\d{0,2})(MO|TU|WE|TH|FR|SA|SU)")
# Evaluation stops before the last year a datetime can hold, so that no arithmetic overflows.
_LAST_WALL = dt.datetime(9999, 1, 1)  # noqa: DTZ001
# Where the check that a rule ever produces looks: the rule's last century before _LAST_WALL.
_PROBE_FROM = dt.datetime(9899, 1, 1)  # noqa: DTZ001


def _refuse(message: str) -> InvalidTiming:
    return InvalidTiming(FIELD, message)


@dataclass(frozen=True)
class Recurrence:
    """A parsed, checked rule: its normalised ``text`` and what evaluating it needs."""

    text: str
    freq: str
    interval: int
    dtstart: dt.datetime
    until: dt.datetime | None
    parts: dict[str, str]
    # The rule for dateutil: the parts RFC 5545 takes from DTSTART spelled out, so that
    # DTSTART can move by whole periods without changing what the rule means.
    explicit: str

    @property
    def explicit_parts(self) -> dict[str, str]:
        return dict(part.split("=", 1) for part in self.explicit.split(";"))

    def walls_from(self, after: dt.datetime) -> Iterator[dt.datetime]:
        """Naive wall times of the rule at or after ``after``, in order."""
        for wall in rrulestr(self.explicit, dtstart=self.phase_start(after)):
            if wall >= _LAST_WALL:
                return
            if wall >= after:
                yield wall

    def phase_start(self, after: dt.datetime) -> dt.datetime:
        """The start of the last period at or before ``after`` in the rule's phase (a whole
        number of FREQ x INTERVAL periods from DTSTART), or DTSTART itself."""
        wkst = WEEKDAYS.index(self.parts.get("WKST", "MO"))
        first, target = _period(self.freq, self.dtstart, wkst), _period(self.freq, after, wkst)
        periods = (target - first) // self.interval
        if periods <= 0:
            return self.dtstart
        return _period_start(self.freq, first + periods * self.interval, wkst)

    def produces(self) -> bool:
        """Whether the rule, UNTIL aside, ever produces a wall time: looked for in its last
        century (dateutil stops at year 9999, so the search is bounded)."""
        without_until = ";".join(p for p in self.explicit.split(";") if not p.startswith("UNTIL"))
        try:
            probe = rrulestr(without_until, dtstart=self.phase_start(_PROBE_FROM))
            return next(iter(probe), None) is not None
        except ValueError:  # dateutil's "empty rule" (BYHOUR unreachable at this INTERVAL)
            return False


def _period(freq: str, moment: dt.datetime, wkst: int) -> int:
    """The index of the FREQ period holding ``moment`` (weeks start on ``wkst``)."""
    if freq == "YEARLY":
        return moment.year
    if freq == "MONTHLY":
        return moment.year * 12 + moment.month - 1
    ordinal = moment.toordinal()  # day 1 (0001-01-01) is a Monday
    if freq == "WEEKLY":
        return (ordinal - 1 - wkst) // 7
    if freq == "DAILY":
        return ordinal
    return ordinal * 24 + moment.hour


def _period_start(freq: str, index: int, wkst: int) -> dt.datetime:
    if freq == "YEARLY":
        return dt.datetime(index, 1, 1)  # noqa: DTZ001
    if freq == "MONTHLY":
        return dt.datetime(index // 12, index % 12 + 1, 1)  # noqa: DTZ001
    if freq == "WEEKLY":
        return dt.datetime.fromordinal(7 * index + 1 + wkst)
    if freq == "DAILY":
        return dt.datetime.fromordinal(index)
    return dt.datetime.fromordinal(index // 24) + dt.timedelta(hours=index % 24)


def parse(text: object) -> Recurrence:
    """The checked rule ``text``: an RRULE line (``RRULE:`` optional), optionally after a
    ``DTSTART:<local date-time>`` line. ``InvalidTiming`` (``timing.rrule``) says what is
    wrong."""
    if not isinstance(text, str):
        raise _refuse(f"a rule must be text, got {text!r}")
    if len(text) > MAX_LENGTH:
        raise _refuse(f"a rule must be at most {MAX_LENGTH} characters")
    return _parse(text)


# Cached: planning reads the same rules on every pass, and refusing a rule that never produces
# costs up to a century of dateutil's iteration.
@functools.lru_cache(maxsize=1024)
def _parse(text: str) -> Recurrence:
    dtstart, line = _lines(text)
    parts = _parts(line)
    freq = parts["FREQ"]
    interval = _interval(parts.get("INTERVAL", "1"), freq)
    until = _local_date_time("UNTIL", parts["UNTIL"]) if "UNTIL" in parts else None
    start = DEFAULT_DTSTART if dtstart is None else dtstart
    if until is not None and until < start:
        raise _refuse(f"UNTIL {parts['UNTIL']} is before DTSTART: the rule never produces")
    rule = ";".join(f"{name}={value}" for name, value in parts.items())
    normalised = rule if dtstart is None else f"DTSTART:{_format(dtstart)}\nRRULE:{rule}"
    if len(normalised) > MAX_LENGTH:
        raise _refuse(f"a rule must be at most {MAX_LENGTH} characters")
    implied = {k: v for k, v in _implied(parts, start).items() if k not in parts}
    explicit = ";".join(f"{k}={v}" for k, v in {**parts, **implied}.items())
    recurrence = Recurrence(normalised, freq, interval, start, until, parts, explicit)
    try:
        produces = recurrence.produces()
    except (ValueError, TypeError) as exc:
        raise _refuse(f"{rule!r} is not a valid rule ({exc})") from None
    if not produces:
        raise _refuse(f"{rule!r} never produces a date (or less than once a century)")
    return recurrence


def _lines(text: str) -> tuple[dt.datetime | None, str]:
    """The DTSTART (``None`` when not given) and the RRULE line of ``text``."""
    dtstart, rule = None, None
    for line in (line.strip() for line in text.strip().splitlines()):
        name, colon, value = line.partition(":")
        name = name.strip().upper()
        if colon and name == "DTSTART" and dtstart is None:
            dtstart = _local_date_time("DTSTART", value.strip().upper())
            if not dt.datetime(1970, 1, 1) <= dtstart < dt.datetime(3000, 1, 1):  # noqa: DTZ001
                raise _refuse("DTSTART must be from 1970 to 2999")
        elif (not colon or name == "RRULE") and rule is None and line:
            rule = value if colon else line
        elif line:
            raise _refuse(
                f"{line[:40]!r}: a rule is one RRULE line, optionally after one "
                "DTSTART:<local date-time> line (the zone is zone=; exclusions go in exclude=)"
            )
    if not rule:
        raise _refuse("a rule needs an RRULE line such as 'FREQ=DAILY;BYHOUR=9'")
    return dtstart, rule


def _parts(line: str) -> dict[str, str]:
    """The rule parts of an RRULE line, checked one by one, FREQ first."""
    parts: dict[str, str] = {}
    for pair in "".join(line.split()).upper().strip(";").split(";"):
        name, equals, value = pair.partition("=")
        if name in REFUSED_PARTS:
            raise _refuse(REFUSED_PARTS[name])
        if not equals or not value or name not in PARTS:
            raise _refuse(f"{pair!r} is not a rule part (NAME=VALUE, for example FREQ=DAILY)")
        if name in parts:
            raise _refuse(f"{name} is given twice")
        parts[name] = value
    if "FREQ" not in parts:
        raise _refuse("FREQ is required, for example FREQ=MONTHLY")
    freq = parts["FREQ"]
    if freq in ("MINUTELY", "SECONDLY"):
        raise _refuse(f"FREQ={freq} is too frequent for a calendar rule: use every() or cron()")
    if freq not in FREQUENCIES:
        raise _refuse(f"FREQ must be one of {', '.join(FREQUENCIES)}, got {freq!r}")
    for name, value in parts.items():
        if name in INTEGER_PARTS:
            _check_integers(name, value)
    if "WKST" in parts and parts["WKST"] not in WEEKDAYS:
        raise _refuse(f"WKST must be one of {', '.join(WEEKDAYS)}, got {parts['WKST']!r}")
    if "BYDAY" in parts:
        _check_byday(parts["BYDAY"], freq, "BYWEEKNO" in parts)
    _check_combinations(parts, freq)
    return {"FREQ": freq, **parts}


def _check_integers(name: str, value: str) -> None:
    low, high, negative = INTEGER_PARTS[name]
    for item in value.split(","):
        number = int(item) if re.fullmatch(r"[+-]?\d{1,3}", item) else None
        magnitude = None if number is None else (abs(number) if negative else number)
        if magnitude is None or not low <= magnitude <= high or (negative and number == 0):
            span = f"{low} to {high}" + (f" or -{high} to -{low}" if negative else "")
            raise _refuse(f"{name} values are {span}, got {item!r}")


def _check_byday(value: str, freq: str, by_week_number: bool) -> None:
    limit = {"MONTHLY": 5, "YEARLY": 53}.get(freq, 0)
    for item in value.split(","):
        match = _BYDAY.fullmatch(item)
        if match is None:
            raise _refuse(f"BYDAY values are weekdays like MO or 1MO or -1FR, got {item!r}")
        if match.group(2) or match.group(1):
            ordinal = int(match.group(2) or "0")
            if limit == 0 or by_week_number:
                raise _refuse(
                    f"BYDAY={item}: a numbered weekday needs FREQ=MONTHLY or FREQ=YEARLY "
                    "(without BYWEEKNO)"
                )
            if not 1 <= ordinal <= limit:
                raise _refuse(f"BYDAY={item}: the number is 1 to {limit} or -{limit} to -1")


def _check_combinations(parts: dict[str, str], freq: str) -> None:
    """The combinations RFC 5545 rules out."""
    if "BYWEEKNO" in parts and freq != "YEARLY":
        raise _refuse("BYWEEKNO needs FREQ=YEARLY")
    if "BYYEARDAY" in parts and freq in ("MONTHLY", "WEEKLY", "DAILY"):
        raise _refuse(f"BYYEARDAY cannot be used with FREQ={freq}")
    if "BYMONTHDAY" in parts and freq == "WEEKLY":
        raise _refuse("BYMONTHDAY cannot be used with FREQ=WEEKLY")
    if "BYSETPOS" in parts and not any(p.startswith("BY") and p != "BYSETPOS" for p in parts):
        raise _refuse("BYSETPOS picks among the dates of another BYxxx part; there is none")


def _interval(value: str, freq: str) -> int:
    limit = MAX_INTERVAL[freq]
    if not re.fullmatch(r"\d{1,7}", value) or not 1 <= int(value) <= limit:
        raise _refuse(f"INTERVAL for FREQ={freq} is 1 to {limit} (a century), got {value!r}")
    return int(value)


def _local_date_time(name: str, value: str) -> dt.datetime:
    if not _LOCAL_DATE_TIME.fullmatch(value):
        raise _refuse(
            f"{name} is a local date-time like 20270101T000000 (no Z, no TZID: the zone is "
            f"the schedule's zone=), got {value!r}"
        )
    try:
        return dt.datetime.strptime(value, "%Y%m%dT%H%M%S")  # noqa: DTZ007 (a wall time)
    except ValueError:
        raise _refuse(f"{name} {value!r} is not a date-time") from None


def _format(moment: dt.datetime) -> str:
    return moment.strftime("%Y%m%dT%H%M%S")


def _implied(parts: dict[str, str], dtstart: dt.datetime) -> dict[str, str]:
    """The parts RFC 5545 (and dateutil) take from DTSTART when the rule leaves them out."""
    freq = parts["FREQ"]
    implied = {"WKST": "MO"}  # RFC 5545's default, not the process's calendar.firstweekday()
    if not {"BYWEEKNO", "BYYEARDAY", "BYMONTHDAY", "BYDAY"} & parts.keys():
        if freq == "YEARLY":
            implied["BYMONTH"] = str(dtstart.month)
        if freq in ("YEARLY", "MONTHLY"):
            implied["BYMONTHDAY"] = str(dtstart.day)
        if freq == "WEEKLY":
            implied["BYDAY"] = WEEKDAYS[dtstart.weekday()]
    if freq != "HOURLY":
        implied["BYHOUR"] = str(dtstart.hour)
    implied["BYMINUTE"] = str(dtstart.minute)
    implied["BYSECOND"] = str(dtstart.second)
    return implied


@dataclass(frozen=True)
class RRule:
    """An RFC 5545 recurrence rule evaluated as wall-clock time in ``zone``, optionally with a
    business calendar (``exclude``) and what an excluded occurrence does (``on_excluded``).

    Validated on first use (``validate()``), like every timing, so that ``schedule()`` can
    report a bad argument naming its schedule; ``exclude`` then holds a ``Calendar`` or None.
    """

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
        listed. Rules are hourly at most, so a month holds at most 744."""
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
        if self.calendar is None or end <= start:
            return []
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
        for wall in self.recurrence.walls_from(self._first_wall(_wall(start, tz) - WALL_MARGIN)):
            moved = self._moved_date(wall.date())
            if moved is not None:
                for instant in self._resolve(dt.datetime.combine(moved, wall.time()), tz):
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

    def describe(self) -> str:
        """The rule in words, for the admin and ``jobs inspect``: "monthly on the last weekday
        at 18:00 America/New_York, excluding US holidays, moved to the previous business
        day". Readable, not exhaustive: the rule text is shown beside it."""
        recurrence = self.recurrence
        adverb, unit = _UNITS[recurrence.freq]
        words = [adverb if recurrence.interval == 1 else f"every {recurrence.interval} {unit}s"]
        # With the parts RFC 5545 takes from DTSTART: FREQ=MONTHLY alone is "on the 1st".
        words += _date_phrases(recurrence.explicit_parts, unit)
        words.append(f"{_time_phrase(recurrence)} {self.zone}")
        if recurrence.text.startswith("DTSTART"):
            words.append(f"from {recurrence.dtstart:%Y-%m-%d %H:%M}")
        if recurrence.until is not None:
            words.append(f"until {recurrence.until:%Y-%m-%d %H:%M}")
        text = " ".join(words)
        if self.calendar is not None:
            text += f", excluding {self.calendar.describe()}{_MOVES[self.on_excluded]}"
        return text


_UNITS = {
    "YEARLY": ("yearly", "year"),
    "MONTHLY": ("monthly", "month"),
    "WEEKLY": ("weekly", "week"),
    "DAILY": ("daily", "day"),
    "HOURLY": ("hourly", "hour"),
}
# English names written out: strftime's %A and %B follow the machine's locale.
_DAY_NAMES = dict(
    zip(
        WEEKDAYS,
        ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
        strict=True,
    )
)
_MONTH_NAMES = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_ORDINALS = ("first", "second", "third", "fourth", "fifth")
_MOVES = {
    OnExcluded.SKIP: "",
    OnExcluded.NEXT: ", moved to the next business day",
    OnExcluded.PREVIOUS: ", moved to the previous business day",
}


def _date_phrases(parts: dict[str, str], unit: str) -> list[str]:
    """``in January and July``, ``on the 15th``, ``on the last weekday``, ..."""
    phrases = []
    if "BYMONTH" in parts:
        phrases.append("in " + _listing([_MONTH_NAMES[n - 1] for n in _ints(parts["BYMONTH"])]))
    if "BYWEEKNO" in parts:
        phrases.append("in week " + _listing([str(n) for n in _ints(parts["BYWEEKNO"])]))
    for name, of in (("BYYEARDAY", " of the year"), ("BYMONTHDAY", "")):
        if name in parts:
            phrases.append(f"on {_listing([_day_number(n) for n in _ints(parts[name])])}{of}")
    positions = _listing([_ordinal(n) for n in _ints(parts.get("BYSETPOS", ""))])
    days_of_week = parts.get("BYDAY", "").split(",") if "BYDAY" in parts else []
    if days_of_week and positions and all(d in WEEKDAYS for d in days_of_week):
        return [*phrases, f"on the {positions} {_kind_of_day(days_of_week)}"]
    if days_of_week:
        phrases.append("on " + _weekday_names(days_of_week))
    if positions and phrases:
        phrases[-1] += f", keeping the {positions} of each {unit}"
    return phrases


def _weekday_names(days: list[str]) -> str:
    if sorted(days) == sorted(WEEKDAYS[:5]):
        return "weekdays"
    names = []
    for day in days:
        match = _BYDAY.fullmatch(day)
        assert match is not None  # checked by parse()
        sign, digits, name = match.groups()
        number = f"the {_ordinal(int(sign + digits))} " if digits else ""
        names.append(number + _DAY_NAMES[name])
    return _listing(names)


def _kind_of_day(days: list[str]) -> str:
    chosen = set(days)
    if chosen == set(WEEKDAYS[:5]):
        return "weekday"
    if chosen == set(WEEKDAYS[5:]):
        return "weekend day"
    if chosen == set(WEEKDAYS):
        return "day"
    return " or ".join(_DAY_NAMES[d] for d in WEEKDAYS if d in chosen)


def _time_phrase(recurrence: Recurrence) -> str:
    """``at 18:00``; ``at :00 and :30 past the hour`` for an hourly rule."""
    explicit = recurrence.explicit_parts
    minutes, seconds = _ints(explicit["BYMINUTE"]), _ints(explicit["BYSECOND"])
    if recurrence.freq == "HOURLY":
        marks = [f":{m:02d}" + (f":{s:02d}" if s else "") for m in minutes for s in seconds]
        hours = recurrence.parts.get("BYHOUR")
        during = f" in hours {_listing([str(h) for h in _ints(hours)])}" if hours else ""
        return f"at {_listing(marks)} past the hour{during}"
    times = sorted(
        dt.time(h, m, s) for h in _ints(explicit["BYHOUR"]) for m in minutes for s in seconds
    )
    if len(times) > 6:
        return f"at {len(times)} times of day"
    return "at " + _listing([t.strftime("%H:%M:%S" if t.second else "%H:%M") for t in times])


def _ints(value: str | None) -> list[int]:
    """The numbers of a list part in reading order: from the start, then from the end."""
    return sorted((int(v) for v in value.split(",")), key=lambda n: (n < 0, n)) if value else []


def _ordinal(n: int) -> str:
    """``first``, ``22nd``, ``last``, ``second-to-last``."""
    if n < 0:
        return "last" if n == -1 else f"{_ordinal(-n)}-to-last"
    if n <= len(_ORDINALS):
        return _ORDINALS[n - 1]
    return _day_number(n).removeprefix("the ")


def _day_number(n: int) -> str:
    """``the 15th``, ``the last day``, ``the 2nd-to-last day``."""
    if n == -1:
        return "the last day"
    suffix = (
        "th" if 10 <= abs(n) % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(abs(n) % 10, "th")
    )
    return f"the {abs(n)}{suffix}" + ("-to-last day" if n < 0 else "")


def _listing(items: list[str]) -> str:
    return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 1 else items)


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
