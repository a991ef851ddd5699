"""The worked examples of docs/schedules.md ("Calendar-based schedules"), run as written.

Each example in the doc is a python block after ``<!-- example: NAME -->`` and one or more text
blocks after ``<!-- instants: NAME -->``. A text block starts with ``from <instant>``, may say
``in words: ...`` (indented lines continue it), and lists one instant a line:
``<UTC>  <local>  [skipped (excluded)]  [# a note]``. The test executes the python block (a
real ``schedule(...)`` call, with the declared set emptied around it) and asserts that, from
the ``from`` instant to the last instant listed, the timing runs at exactly the instants not
marked skipped and skips exactly those marked; that the local column is each instant in the
schedule's zone; and that the words are ``describe()``, what ``jobs inspect`` shows.

So that a doc regenerated from a wrong implementation still fails, each example's first two
instants are also written here as literals, reasoned from the 2027 calendar (January 1 is a
Friday; US daylight saving time runs from March 14 to November 7, the EU's from March 28 to
October 31; Easter Sunday is March 28), never computed with the module's helpers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import User

from django_jobs import WEEKENDS, Holidays, JobsError, rrule, services
from django_jobs.checks import check_declared_schedules
from django_jobs.declarations import Declaration, declared
from django_jobs.models import AuditRecord, Schedule
from django_jobs.scheduling.rrules import RRule
from django_jobs.worker.planning import plan_due

DOC = Path(__file__).resolve().parent.parent / "docs" / "schedules.md"
INSTANT = "%Y-%m-%dT%H:%MZ"
# English names written out: strftime's %a follows the machine's locale.
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_EXAMPLE = re.compile(r"<!-- example: (?P<name>[\w-]+) -->\n```python\n(?P<body>.*?)```", re.S)
_INSTANTS = re.compile(r"<!-- instants: (?P<name>[\w-]+) -->\n```text\n(?P<body>.*?)```", re.S)
_LINE = re.compile(
    r"(?P<utc>\d{4}-\d\d-\d\dT\d\d:\d\dZ)  (?P<local>\w{3} \d{4}-\d\d-\d\d \d\d:\d\d \S+)"
    r"(?P<skipped>  skipped \(excluded\))?(?:  # .*)?"
)


def utc(text: str) -> datetime:
    return datetime.strptime(text, INSTANT).replace(tzinfo=UTC)


@dataclass(frozen=True)
class Listing:
    """One instants block of the doc."""

    start: datetime
    words: str | None
    runs: list[datetime]
    skipped: list[datetime]
    local: dict[datetime, str]

    @property
    def end(self) -> datetime:
        """Just after the last instant listed: the window the listing covers."""
        return max(self.runs + self.skipped) + timedelta(seconds=1)


def parse_listing(body: str) -> Listing:
    lines = body.rstrip("\n").split("\n")
    first = re.fullmatch(r"from (\S+)", lines[0])
    assert first is not None, f"an instants block starts with 'from <instant>': {lines[0]!r}"
    words: str | None = None
    runs: list[datetime] = []
    skipped: list[datetime] = []
    local: dict[datetime, str] = {}
    for line in lines[1:]:
        if line.startswith("in words: "):
            words = line.removeprefix("in words: ")
        elif line.startswith(" ") and words is not None and not runs:
            words += " " + line.strip()
        else:
            match = _LINE.fullmatch(line)
            assert match is not None, f"not an instant line: {line!r}"
            instant = utc(match["utc"])
            (skipped if match["skipped"] else runs).append(instant)
            local[instant] = match["local"]
    return Listing(utc(first.group(1)), words, runs, skipped, local)


def examples() -> dict[str, str]:
    text = DOC.read_text()
    found: dict[str, str] = {}
    for match in _EXAMPLE.finditer(text):
        assert match["name"] not in found, f"example {match['name']!r} is in the doc twice"
        found[match["name"]] = match["body"]
    return found


def listings(name: str) -> list[Listing]:
    found = _INSTANTS.finditer(DOC.read_text())
    return [parse_listing(m["body"]) for m in found if m["name"] == name]


def declare(name: str, monkeypatch: pytest.MonkeyPatch) -> Declaration:
    """Run the doc's ``schedule(...)`` block as a ``schedules.py`` module would."""
    monkeypatch.setattr(declared, "_items", {})
    exec(compile(examples()[name], f"{DOC}:{name}", "exec"), {"__name__": f"docs.{name}"})
    (declaration,) = declared.all()
    return declaration


def local_column(instant: datetime, zone: str) -> str:
    moment = instant.astimezone(ZoneInfo(zone))
    return f"{DAYS[moment.weekday()]} {moment:%Y-%m-%d %H:%M} {moment.tzname()}"


def assert_doc_matches(name: str, monkeypatch: pytest.MonkeyPatch) -> RRule:
    """The example as declared passes the checks, and runs and skips what its listings say."""
    declaration = declare(name, monkeypatch)
    timing = declaration.timing
    assert isinstance(timing, RRule)
    # The doc's jobs are not registered here (E014); every other check passes, E018/E019
    # (a local schedule's reason and DST rules) included.
    problems = [m for m in check_declared_schedules() if m.id != "django_jobs.E014"]
    assert problems == []
    found = listings(name)
    assert found, f"example {name!r} has no instants in the doc"
    assert [listing.words for listing in found if listing.words] == [timing.describe()]
    for listing in found:
        assert timing.between(listing.start, listing.end) == listing.runs
        assert timing.excluded_between(listing.start, listing.end) == listing.skipped
        following = timing.iter_from(listing.start)
        assert [next(following) for _ in listing.runs] == listing.runs
        for instant, shown in listing.local.items():
            assert shown == local_column(instant, timing.zone)
    return timing


def first_two_runs(timing: RRule) -> list[str]:
    following = timing.iter_from(datetime(2027, 1, 1, tzinfo=UTC))
    return [next(following).strftime(INSTANT) for _ in range(2)]


def test_every_example_in_the_doc_has_its_test():
    assert set(examples()) == {
        "last-business-day",
        "second-tuesday",
        "bavarian-weekdays",
        "payroll",
    }


def test_last_business_day_of_the_month_in_new_york(monkeypatch):
    timing = assert_doc_matches("last-business-day", monkeypatch)
    # January 31 and February 28, 2027 are Sundays: the Fridays before, 18:00 EST (UTC-5).
    assert first_two_runs(timing) == ["2027-01-29T23:00Z", "2027-02-26T23:00Z"]
    # May 31 is Memorial Day (the last Monday of May): back over the weekend to Friday, 18:00
    # EDT (UTC-4). New Year's Day 2028 is a Saturday, observed on Friday, December 31.
    (listing,) = listings("last-business-day")
    assert utc("2027-05-28T22:00Z") in listing.runs
    assert listing.runs[-1] == utc("2027-12-30T23:00Z")


def test_second_tuesday_of_each_month(monkeypatch):
    timing = assert_doc_matches("second-tuesday", monkeypatch)
    # January 2027 begins on a Friday: its Tuesdays are the 5th and 12th. February 1 is a
    # Monday: its Tuesdays are the 2nd and 9th. UTC: no offset.
    assert first_two_runs(timing) == ["2027-01-12T10:00Z", "2027-02-09T10:00Z"]


def test_weekdays_in_berlin_except_bavarian_holidays(monkeypatch):
    timing = assert_doc_matches("bavarian-weekdays", monkeypatch)
    # New Year's Day (Friday) and Epiphany (Wednesday, January 6) are Bavarian holidays;
    # Monday January 4 and Tuesday January 5 run at 09:00 CET (UTC+1).
    assert first_two_runs(timing) == ["2027-01-04T08:00Z", "2027-01-05T08:00Z"]
    first, easter = listings("bavarian-weekdays")
    assert first.skipped == [utc("2027-01-01T08:00Z"), utc("2027-01-06T08:00Z")]
    # Good Friday (March 26, CET) and Easter Monday (March 29, CEST, UTC+2).
    assert easter.skipped == [utc("2027-03-26T08:00Z"), utc("2027-03-29T07:00Z")]


def test_payroll_on_the_15th_moved_to_the_previous_business_day(monkeypatch):
    timing = assert_doc_matches("payroll", monkeypatch)
    # January 15 is a Friday, 09:00 EST. February 15 is Washington's Birthday (the third
    # Monday of February): back over the weekend to Friday, February 12.
    assert first_two_runs(timing) == ["2027-01-15T14:00Z", "2027-02-12T14:00Z"]


def test_the_readme_payroll_rule_is_the_docs_payroll(monkeypatch):
    readme = (DOC.parent.parent / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "payroll =" in b]
    namespace: dict[str, RRule] = {}
    exec(block, namespace)
    # Compared as validated, the way schedule() holds a timing: exclude= becomes a Calendar.
    assert namespace["payroll"].validate() == declare("payroll", monkeypatch).timing


def test_an_occurrence_moved_across_a_dst_change_takes_the_offset_of_its_new_date():
    # March 29, 2027 is Easter Monday, the day after Berlin's clocks go forward. Back over
    # Easter Sunday, Saturday and Good Friday to Thursday, March 25: 09:00 CET, not CEST.
    timing = rrule(
        "FREQ=YEARLY;BYMONTH=3;BYMONTHDAY=29;BYHOUR=9;BYMINUTE=0",
        zone="Europe/Berlin",
        skipped="shift",
        repeated="first",
        reason="test",
        exclude=[Holidays("DE", subdiv="BY"), WEEKENDS],
        on_excluded="previous",
    )
    year = timing.between(utc("2027-01-01T00:00Z"), utc("2028-01-01T00:00Z"))
    assert year == [utc("2027-03-25T08:00Z")]


@pytest.mark.django_db
def test_a_holidays_package_upgrade_is_audited_as_a_timing_change(monkeypatch):
    declaration = declare("payroll", monkeypatch)
    now = utc("2027-01-01T00:00Z")
    services.sync_schedules([declaration], now=now)
    record = Schedule.objects.get(key="payroll.submit")
    installed = record.calendar["holidays_version"]
    # The record as an older release of the holidays package wrote it.
    older = {**record.calendar, "holidays_version": "0.1"}
    Schedule.objects.filter(pk=record.pk).update(calendar=older)

    report = services.sync_schedules([declaration], now=now)

    assert report.updated == ["payroll.submit"]
    changed = AuditRecord.objects.get(action="schedule.timing_changed")
    assert changed.before["calendar"]["holidays_version"] == "0.1"
    assert changed.after["calendar"]["holidays_version"] == installed
    assert Schedule.objects.get(pk=record.pk).calendar["holidays_version"] == installed


@pytest.mark.django_db
def test_a_moved_payroll_is_replayed_at_the_instant_it_ran(monkeypatch):
    services.sync_schedules([declare("payroll", monkeypatch)], now=utc("2027-01-01T00:00Z"))
    record = Schedule.objects.get(key="payroll.submit")
    root = User.objects.create_superuser("root", "root@example.com", "x")
    now = utc("2027-03-01T00:00Z")

    with pytest.raises(JobsError) as refused:
        services.replay_at(
            record, at=utc("2027-02-15T14:00Z"), actor=root, reason="rule date", now=now
        )
    assert "the nearest are 2027-02-12T14:00:00+00:00 and 2027-03-15T13:00:00+00:00" in str(
        refused.value
    )

    moved = services.replay_at(
        record, at=utc("2027-02-12T14:00Z"), actor=root, reason="moved date", now=now
    )
    assert moved.scheduled_at == utc("2027-02-12T14:00Z")


@pytest.mark.django_db
def test_a_stored_calendar_the_installed_package_does_not_know_is_parked(monkeypatch):
    services.sync_schedules([declare("payroll", monkeypatch)], now=utc("2027-01-01T00:00Z"))
    record = Schedule.objects.get(key="payroll.submit")
    # As if an upgrade of the holidays package had dropped the country.
    unknown = {**record.calendar, "holidays": [{"country": "XX", "subdiv": None}]}
    Schedule.objects.filter(pk=record.pk).update(calendar=unknown)

    plan_due(now=utc("2027-01-15T14:00Z"))

    parked = Schedule.objects.get(pk=record.pk)
    assert (parked.parked_field, parked.next_due_at) == ("timing.exclude", None)
    assert "'XX'" in parked.parked_reason
