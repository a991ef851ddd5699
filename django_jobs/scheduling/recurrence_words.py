"""A recurrence rule in words, for the admin and ``jobs inspect``: "monthly on the last
weekday at 18:00". Readable, not exhaustive: the rule text is shown beside it.
"""

from __future__ import annotations

import datetime as dt

from .recurrences import BYDAY_ITEM, WEEKDAYS, Recurrence

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


def describe(recurrence: Recurrence, zone: str) -> str:
    """The rule in words, in ``zone``: "monthly on the last weekday at 18:00
    America/New_York", with its DTSTART and UNTIL when it names them."""
    adverb, unit = _UNITS[recurrence.freq]
    words = [adverb if recurrence.interval == 1 else f"every {recurrence.interval} {unit}s"]
    # With the parts RFC 5545 takes from DTSTART: FREQ=MONTHLY alone is "on the 1st".
    words += _date_phrases(recurrence.explicit_parts, unit)
    words.append(f"{_time_phrase(recurrence)} {zone}")
    if recurrence.text.startswith("DTSTART"):
        words.append(f"from {recurrence.dtstart:%Y-%m-%d %H:%M}")
    if recurrence.until is not None:
        words.append(f"until {recurrence.until:%Y-%m-%d %H:%M}")
    return " ".join(words)


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
        match = BYDAY_ITEM.fullmatch(day)
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
