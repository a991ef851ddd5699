"""Business calendars: which local dates are excluded, how they are stored, what is refused.

Expected holidays are written by hand from the published 2027 calendars (US federal holidays
with their observed days, Bavaria's public holidays), not read from the holidays package.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta

import pytest

from django_jobs import WEEKENDS, Calendar, Holidays
from django_jobs.scheduling.calendars import calendar
from django_jobs.scheduling.timings import InvalidTiming


def built(exclude: object) -> Calendar:
    found = calendar(exclude)
    assert found is not None
    return found


def days_of(year: int) -> list[date]:
    first = date(year, 1, 1)
    return [first + timedelta(days=n) for n in range((date(year + 1, 1, 1) - first).days)]


def test_bavarian_public_holidays_on_weekdays_in_2027():
    bavaria = built(Holidays("DE", subdiv="BY"))
    excluded = [d for d in days_of(2027) if d.weekday() < 5 and bavaria.excluded(d)]
    # Easter Sunday is March 28, 2027. May 1 is a Saturday, August 15 and October 3 Sundays,
    # December 25/26 a Saturday and Sunday: none of them falls on a weekday.
    assert excluded == [
        date(2027, 1, 1),  # New Year's Day, Friday
        date(2027, 1, 6),  # Epiphany, Wednesday
        date(2027, 3, 26),  # Good Friday
        date(2027, 3, 29),  # Easter Monday
        date(2027, 5, 6),  # Ascension Day (Easter + 39)
        date(2027, 5, 17),  # Whit Monday (Easter + 50)
        date(2027, 5, 27),  # Corpus Christi (Easter + 60)
        date(2027, 11, 1),  # All Saints' Day, Monday
    ]


def test_us_holidays_include_the_observed_days():
    us = built(Holidays("US"))
    # New Year's Day 2028 is a Saturday: federal offices close on Friday, December 31, 2027.
    assert us.excluded(date(2027, 12, 31))
    # Christmas 2027 is a Saturday: observed on Friday, December 24.
    assert us.excluded(date(2027, 12, 24))
    assert not us.excluded(date(2027, 12, 30))
    # Memorial Day, the last Monday of May 2027.
    assert us.excluded(date(2027, 5, 31))
    assert not us.excluded(date(2027, 5, 24))


def test_weekends_are_saturday_and_sunday():
    week = [date(2027, 1, 4) + timedelta(days=n) for n in range(7)]  # Monday to Sunday
    assert [WEEKENDS.excluded(d) for d in week] == [False] * 5 + [True, True]


def test_explicit_dates_are_excluded_and_nothing_else():
    closures = built([date(2027, 8, 2), date(2027, 8, 3)])
    assert [d for d in days_of(2027) if closures.excluded(d)] == [
        date(2027, 8, 2),
        date(2027, 8, 3),
    ]


def test_calendar_combines_holidays_weekends_dates_and_calendars():
    inner = Calendar(dates=(date(2027, 7, 2),))
    combined = built([Holidays("US"), [WEEKENDS, date(2027, 8, 2)], inner])
    assert combined == Calendar(
        holidays=(Holidays("US"),),
        dates=(date(2027, 7, 2), date(2027, 8, 2)),
        weekends=True,
    )
    assert combined.excluded(date(2027, 7, 5))  # Independence Day observed (Monday)
    assert combined.excluded(date(2027, 7, 3))  # a Saturday
    assert combined.excluded(date(2027, 8, 2))
    assert not combined.excluded(date(2027, 8, 4))


@pytest.mark.parametrize("exclude", [None, [], ()])
def test_nothing_to_exclude_is_no_calendar(exclude):
    assert calendar(exclude) is None


def test_repeated_entries_store_once_in_one_order():
    a = built([date(2027, 2, 1), Holidays("US"), date(2027, 1, 1), Holidays("US")])
    b = built([Holidays("US"), date(2027, 1, 1), date(2027, 2, 1)])
    assert a == b
    assert a.definition() == b.definition()


def test_definition_is_json_and_round_trips():
    original = built([Holidays("DE", subdiv="BY"), WEEKENDS, date(2027, 12, 24)])
    definition = original.definition()
    assert json.loads(json.dumps(definition)) == definition
    assert definition["holidays"] == [{"country": "DE", "subdiv": "BY"}]
    assert definition["dates"] == ["2027-12-24"]
    assert definition["weekends"] is True
    assert isinstance(definition["holidays_version"], str)
    assert definition["holidays_version"]
    assert Calendar.from_definition(definition) == original
    assert Calendar.from_definition(definition).definition() == definition


def test_definition_without_a_version_is_read():
    definition = {"holidays": [{"country": "US", "subdiv": None}], "dates": [], "weekends": False}
    assert Calendar.from_definition(definition) == Calendar(holidays=(Holidays("US"),))


@pytest.mark.parametrize(
    ("definition", "named"),
    [
        ([], "object"),
        ({"holidays": [], "weekends": False}, "'dates' is missing"),
        ({"holidays": [], "dates": [], "weekends": False, "extra": 1}, "'extra'"),
        ({"holidays": {}, "dates": [], "weekends": False}, "'holidays'"),
        ({"holidays": [{"country": "US"}], "dates": [], "weekends": False}, "'holidays'"),
        ({"holidays": [], "dates": ["2027-13-01"], "weekends": False}, "'dates'"),
        ({"holidays": [], "dates": ["2027-1-1"], "weekends": False}, "'dates'"),
        ({"holidays": [], "dates": [20270101], "weekends": False}, "'dates'"),
        ({"holidays": [], "dates": [], "weekends": "yes"}, "'weekends'"),
        ({"holidays": [], "dates": [], "weekends": False, "holidays_version": 1}, "'holidays_"),
        ({"holidays": [{"country": "XX", "subdiv": None}], "dates": [], "weekends": False}, "XX"),
    ],
)
def test_malformed_definitions_are_refused_naming_the_key(definition, named):
    with pytest.raises(InvalidTiming) as raised:
        Calendar.from_definition(definition)
    assert raised.value.field == "timing.exclude"
    assert named in raised.value.message


def test_unknown_country_is_refused_naming_it():
    with pytest.raises(InvalidTiming, match="country 'XX'") as raised:
        calendar(Holidays("XX"))
    assert raised.value.field == "timing.exclude"


def test_unknown_subdivision_is_refused_naming_it_and_the_known_ones():
    with pytest.raises(InvalidTiming, match="'ZZ' is not a subdivision of DE") as raised:
        calendar(Holidays("DE", subdiv="ZZ"))
    assert "BY" in raised.value.message


@pytest.mark.parametrize(
    "entry",
    [
        "2027-01-01",
        datetime(2027, 1, 1),  # noqa: DTZ001
        42,
        None,
        b"2027-01-01",
        {"date": "2027-01-01"},
    ],
    ids=["text", "datetime", "number", "none", "bytes", "mapping"],
)
def test_entries_that_are_not_dates_are_refused_naming_them(entry):
    with pytest.raises(InvalidTiming) as raised:
        calendar([date(2027, 1, 1), entry])
    assert raised.value.field == "timing.exclude"
    assert "datetime.date" in raised.value.message


def test_dates_outside_1970_to_2999_are_refused():
    with pytest.raises(InvalidTiming, match="0001-01-01"):
        calendar(date.min)


def test_a_calendar_that_excludes_every_day_is_refused():
    year = days_of(2027) + days_of(2028)[:5]
    with pytest.raises(InvalidTiming, match="excludes every day from 2027-01-01"):
        calendar(year)


def test_weekends_and_every_weekday_for_a_year_are_refused():
    weekdays = [d for d in days_of(2027) + days_of(2028) if d.weekday() < 5]
    with pytest.raises(InvalidTiming, match="no business day"):
        calendar([WEEKENDS, weekdays[:300]])


def test_a_long_closure_short_of_a_year_is_accepted():
    closure = days_of(2027)[:300]
    assert built(closure).excluded(date(2027, 10, 27))


def test_too_many_dates_are_refused():
    many = [date(1980, 1, 1) + timedelta(days=2 * n) for n in range(1001)]
    with pytest.raises(InvalidTiming, match="at most 1000"):
        calendar(many)


def test_describe_names_the_sources():
    assert built([Holidays("US"), WEEKENDS]).describe() == "US holidays and weekends"
    assert (
        built([Holidays("DE", subdiv="BY"), date(2027, 12, 24), date(2027, 12, 31)]).describe()
        == "DE-BY holidays and 2 other dates"
    )
    assert built(date(2027, 12, 24)).describe() == "2027-12-24"


def test_one_holidays_entry_given_alone_counts():
    alone = Calendar(holidays=Holidays("US"))  # type: ignore[arg-type]
    assert alone.validate() == Calendar(holidays=(Holidays("US"),))
