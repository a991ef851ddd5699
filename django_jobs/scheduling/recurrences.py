"""A recurrence rule: an iCalendar (RFC 5545) RRULE, parsed, checked and walked as naive
wall-clock time. Pure: no clock, no database.

``parse`` refuses what a schedule cannot run (COUNT, MINUTELY, a rule that never produces...)
with ``InvalidTiming`` (``timing.rrule``) saying what is wrong. dateutil iterates from
DTSTART, so every evaluation first moves DTSTART forward by whole periods of FREQ x INTERVAL
to just before the window (``Recurrence.walls_from``): evaluating 2030 does not walk from 2000.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass

from dateutil.rrule import rrulestr

from .timing import (
    EARLIEST_INSTANT,
    END_OF_INSTANTS,
    INSTANT_WINDOW,
    InvalidTiming,
    check_density,
)

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
# One BYDAY item: a weekday, optionally numbered from the start or end of the period (-1FR).
BYDAY_ITEM = re.compile(r"([+-]?)(\d{0,2})(MO|TU|WE|TH|FR|SA|SU)")
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

    def per_day(self) -> int:
        """The most wall times the rule produces on one date, counted from its parts, never
        by walking: BYHOUR x BYMINUTE x BYSECOND (each part as given, or as RFC 5545 takes it
        from DTSTART: one value), every hour of the day for FREQ=HOURLY without BYHOUR.
        BYSETPOS, INTERVAL and the date parts only ever take wall times away, so this is an
        upper bound, and a business calendar's moves land on these same times of day."""
        parts = self.explicit_parts
        hours = _distinct(parts["BYHOUR"]) if "BYHOUR" in parts else 24
        return hours * _distinct(parts["BYMINUTE"]) * _distinct(parts["BYSECOND"])

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


def _distinct(values: str) -> int:
    return len({int(value) for value in values.split(",")})


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
    check_density(FIELD, recurrence.per_day(), "BYHOUR x BYMINUTE x BYSECOND")
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
        match = BYDAY_ITEM.fullmatch(item)
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
        wall = dt.datetime.strptime(value, "%Y%m%dT%H%M%S")  # noqa: DTZ007 (a wall time)
    except ValueError:
        raise _refuse(f"{name} {value!r} is not a date-time") from None
    # The window of every instant a schedule names (timing.check_instant), read as wall time.
    if not EARLIEST_INSTANT.replace(tzinfo=None) <= wall < END_OF_INSTANTS.replace(tzinfo=None):
        raise _refuse(f"{name} must be {INSTANT_WINDOW} (as a local date-time), got {value!r}")
    return wall


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
