"""Calendar rules as schedule records: stored, planned (an excluded date recorded as a skip),
audited like any timing when their calendar changes, checked (E018/E019 like cron; E030 for a
rule or calendar that cannot be evaluated), and shown in words where operators look."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.checks import run_checks
from django.core.management import call_command
from django.test import Client

from django_jobs import WEEKENDS, Holidays, rrule, runbooks, schedule, services
from django_jobs.checks import check_schedule_records
from django_jobs.declarations import declared
from django_jobs.models import AuditRecord, Limit, Occurrence, OccurrenceState, Schedule
from django_jobs.worker.planning import plan_due

from .factories import OWNERS, ScheduleFactory

pytestmark = pytest.mark.django_db

NEW_YEAR = datetime(2027, 1, 1, 9, 0, tzinfo=UTC)  # a Friday, and a US federal holiday


def declare(key: str = "ops.daily", **fields):
    base = dict(
        job="billing.heartbeat",
        timing=rrule("FREQ=DAILY;BYHOUR=9", exclude=[date(2027, 1, 1)]),
        retention=timedelta(days=30),
        max_delay=timedelta(days=3),  # planned days at a time here: nothing is late
        status="active",
        register=False,
        **OWNERS,
    )
    return schedule(key, **{**base, **fields})


def test_an_excluded_date_is_recorded_as_a_skip_with_reason_excluded() -> None:
    services.sync_schedules([declare()], now=NEW_YEAR - timedelta(hours=1))
    daily = Schedule.objects.get(key="ops.daily")
    assert (daily.timing_kind, daily.rrule) == ("rrule", "FREQ=DAILY;BYHOUR=9")
    assert daily.calendar["dates"] == ["2027-01-01"]
    assert "holidays_version" not in daily.calendar  # no holiday data: upgrades change nothing

    plan_due(now=NEW_YEAR + timedelta(days=2))

    rows = Occurrence.objects.filter(schedule=daily).order_by("scheduled_at")
    assert [(o.scheduled_at, o.state, o.skip_reason) for o in rows] == [
        (NEW_YEAR, OccurrenceState.SKIPPED, "excluded"),
        (NEW_YEAR + timedelta(days=1), OccurrenceState.SCHEDULED, ""),
        (NEW_YEAR + timedelta(days=2), OccurrenceState.SCHEDULED, ""),
    ]


def test_a_calendar_change_is_audited_like_a_timing_change() -> None:
    us = rrule("FREQ=DAILY;BYHOUR=9", exclude=[Holidays("US"), WEEKENDS])
    services.sync_schedules([declare(timing=us)], now=NEW_YEAR)
    new_york = rrule("FREQ=DAILY;BYHOUR=9", exclude=[Holidays("US", subdiv="NY"), WEEKENDS])

    report = services.sync_schedules([declare(timing=new_york)], now=NEW_YEAR)

    assert report.updated == ["ops.daily"]
    changed = AuditRecord.objects.get(action="schedule.timing_changed")
    assert changed.before["calendar"]["holidays"] == [{"country": "US", "subdiv": None}]
    assert changed.after["calendar"]["holidays"] == [{"country": "US", "subdiv": "NY"}]
    assert changed.after["calendar"]["holidays_version"]


def test_a_schedule_changed_from_a_rule_to_cron_keeps_no_rule_behind() -> None:
    from django_jobs import cron

    services.sync_schedules([declare()], now=NEW_YEAR)
    services.sync_schedules([declare(timing=cron("0 9 * * *"))], now=NEW_YEAR)
    daily = Schedule.objects.get(key="ops.daily")
    assert (daily.timing_kind, daily.rrule, daily.calendar, daily.on_excluded) == (
        "cron",
        "",
        {},
        "skip",
    )


def record(key: str, **fields) -> Schedule:
    rule = {"timing_kind": "rrule", "interval": None, "anchor": None, "rrule": "FREQ=DAILY"}
    s = ScheduleFactory.create(key=key, job="billing.heartbeat", **{**rule, **fields})
    Limit.objects.create(schedule=s, keep_for=timedelta(days=7))
    runbooks.write(s)
    return s


def db_messages() -> list[tuple[str | None, str]]:
    return [(m.id, m.msg) for m in check_schedule_records(databases=["default"])]


def test_a_stored_rule_or_calendar_that_cannot_be_evaluated_is_e030_naming_it() -> None:
    record("fine")
    record("bad-rule", rrule="FREQ=MINUTELY")
    unknown = {"country": "XX", "subdiv": None}
    definition = {"holidays": [unknown], "dates": [], "weekends": False, "holidays_version": "0"}
    record("bad-country", calendar=definition)

    found = db_messages()

    assert [m[0] for m in found] == ["django_jobs.E030", "django_jobs.E030"]
    messages = " ".join(m[1] for m in found)
    assert "Schedule 'bad-rule': timing.rrule:" in messages
    assert "MINUTELY" in messages
    assert "Schedule 'bad-country': timing.exclude:" in messages
    assert "'XX'" in messages


def test_a_local_rule_says_why_and_chooses_its_dst_rules_like_cron(monkeypatch) -> None:
    monkeypatch.setattr(declared, "_items", {})
    schedule(
        "ops.local",
        job="billing.heartbeat",
        timing=rrule("FREQ=DAILY;BYHOUR=9", zone="Europe/Berlin"),
        retention=timedelta(days=1),
        status="active",
        **OWNERS,
    )
    found = [
        (m.id, m.msg) for m in run_checks() if m.id in ("django_jobs.E018", "django_jobs.E019")
    ]
    assert [m[0] for m in found] == ["django_jobs.E018", "django_jobs.E019", "django_jobs.E019"]
    assert "rrule(..., reason='...')" in found[0][1]


def test_jobs_inspect_and_the_admin_show_the_rule_in_words() -> None:
    last_business_day = rrule(
        "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=18",
        zone="America/New_York",
        skipped="shift",
        repeated="first",
        reason="books close at 18:00 in New York",
        exclude=[Holidays("US"), WEEKENDS],
        on_excluded="previous",
    )
    services.sync_schedules([declare("finance.close", timing=last_business_day)], now=NEW_YEAR)
    words = last_business_day.describe()
    assert "America/New_York" in words
    User.objects.create_superuser("root", "root@example.com", "x")

    out = StringIO()
    call_command("jobs", "inspect", "finance.close", "--actor", "root", "--json", stdout=out)
    shown = json.loads(out.getvalue())
    assert shown["rule_in_words"] == words
    assert shown["rrule"] == "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=18"
    assert shown["on_excluded"] == "previous"
    # next_runs is the summary's, as for every timing: ten monthly runs, not a week's none.
    assert len(shown["next_runs"]) == 10
    assert {r["local"][11:19] for r in shown["next_runs"]} == {"18:00:00"}

    client = Client()
    client.force_login(User.objects.get(username="root"))
    schedule_id = Schedule.objects.get(key="finance.close").pk
    page = client.get(f"/admin/django_jobs/schedule/{schedule_id}/change/")
    assert page.status_code == 200
    assert words in page.content.decode()


def test_a_row_inserted_by_the_previous_release_gets_the_new_columns_defaults() -> None:
    """A replica of the previous release, still running during a rolling deploy, inserts
    schedules without the columns of migrations 0007, 0008 and 0012: the database fills them
    in."""
    from django.db import connection

    columns = [
        str(f.column)
        for f in Schedule._meta.concrete_fields
        if f.column
        not in {"id", "rrule", "calendar", "on_excluded", "parked_field", "parked_reason", "args"}
    ]
    template = ScheduleFactory.build(key="old.release", next_due_at=NEW_YEAR, created_at=NEW_YEAR)
    values = [
        getattr(template, f.attname) for f in Schedule._meta.concrete_fields if f.column in columns
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO django_jobs_schedule ({', '.join(columns)}) "
            f"VALUES ({', '.join(['%s'] * len(columns))})",
            values,
        )
    row = Schedule.objects.get(key="old.release")
    assert (
        row.rrule,
        row.calendar,
        row.on_excluded,
        row.parked_field,
        row.parked_reason,
        row.args,
    ) == ("", {}, "skip", "", "", {})
    assert plan_due(now=NEW_YEAR).planned == 1
