"""Business-local (non-UTC) schedules say why, and choose what their DST transitions do:
checks E018/E019 on declarations, W023 on records, the run-time service refusing the same,
and the reason shown where operators look (jobs inspect, the admin, the runbooks)."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.checks import run_checks
from django.core.management import call_command

from django_jobs import cron, runbooks, schedule, services
from django_jobs.checks import check_schedule_records
from django_jobs.declarations import InvalidSchedule, declared
from django_jobs.models import Limit, Schedule

from .factories import T0, ScheduleFactory, declaration

pytestmark = pytest.mark.django_db

REASON = "statements reach New York readers at 09:00 their time"


@pytest.fixture
def only(monkeypatch):
    """Declare schedules into an empty registry; return the local-time messages of the checks."""
    monkeypatch.setattr(declared, "_items", {})

    def declare(timing) -> list[tuple[str | None, str]]:
        schedule(
            "billing.local",
            job="billing.heartbeat",
            timing=timing,
            operating_owner="team",
            record_owner="ops@example.com",
            status="active",
            retention=timedelta(days=1),
        )
        ids = ("django_jobs.E018", "django_jobs.E019")
        return [(m.id, m.msg) for m in run_checks() if m.id in ids]

    return declare


def test_a_local_schedule_without_a_reason_is_refused_naming_it(only) -> None:
    found = only(cron("0 9 * * *", zone="America/New_York", skipped="skip", repeated="both"))
    assert found == [
        (
            "django_jobs.E018",
            "Schedule 'billing.local': timing.reason: a schedule in America/New_York (not UTC) "
            "says why: cron(..., reason='...'), for example 'statements go out at 09:00 for "
            "readers in New York'.",
        )
    ]


def test_a_local_schedule_must_choose_both_dst_rules(only) -> None:
    found = only(cron("0 9 * * *", zone="Europe/Berlin", reason=REASON, repeated="last"))
    assert found == [
        (
            "django_jobs.E019",
            "Schedule 'billing.local': timing.skipped: choose what a local time that does not "
            "exist in Europe/Berlin (spring forward) does: skipped='shift' (run at the first "
            "instant after the gap) or 'skip' (do not run that day).",
        )
    ]


def test_the_repeated_choice_is_named_too(only) -> None:
    (found,) = only(cron("0 9 * * *", zone="Europe/Berlin", reason=REASON, skipped="shift"))
    assert found[0] == "django_jobs.E019"
    assert (
        "timing.repeated: choose what a local time that occurs twice in Europe/Berlin" in found[1]
    )
    assert "'first'" in found[1]
    assert "'last'" in found[1]
    assert "'both'" in found[1]


def test_a_complete_local_schedule_passes(only) -> None:
    timing = cron(
        "0 9 * * *", zone="America/New_York", skipped="skip", repeated="both", reason=REASON
    )
    assert only(timing) == []


@pytest.mark.parametrize("zone", ["UTC", "Etc/UTC", "Zulu"])
def test_utc_needs_neither_a_reason_nor_dst_choices(only, zone) -> None:
    assert only(cron("0 9 * * *", zone=zone)) == []


def test_a_record_without_a_reason_is_a_warning_so_migrate_is_not_blocked() -> None:
    s = ScheduleFactory.create(
        key="legacy",
        job="billing.heartbeat",
        timing_kind="cron",
        cron="0 9 * * *",
        interval=None,
        time_zone="Asia/Tokyo",
    )
    Limit.objects.create(schedule=s, keep_for=timedelta(days=7))
    runbooks.write(s)
    messages = [(m.id, m.level, m.msg) for m in check_schedule_records(databases=["default"])]
    assert messages == [
        (
            "django_jobs.W023",
            30,
            "Schedule 'legacy' runs in Asia/Tokyo, not UTC, and its record gives no reason.",
        )
    ]
    Schedule.objects.filter(pk=s.pk).update(zone_reason="Tokyo office hours")
    assert check_schedule_records(databases=["default"]) == []


def test_a_run_time_local_schedule_without_its_choices_is_refused() -> None:
    root = User.objects.create_superuser("root")
    bare = declaration(timing=cron("0 9 * * *", zone="America/New_York"))
    with pytest.raises(
        InvalidSchedule, match=r"'billing.nightly': timing.reason: .*skipped=.*repeated="
    ):
        services.upsert_schedule(bare, actor=root, reason="tenant signed up", now=T0)
    assert not Schedule.objects.exists()


def test_the_reason_is_on_the_record_in_inspect_and_in_the_runbooks() -> None:
    root = User.objects.create_superuser("root")
    timing = cron(
        "0 9 * * *", zone="America/New_York", skipped="skip", repeated="both", reason=REASON
    )
    row = services.upsert_schedule(
        declaration(timing=timing), actor=root, reason="tenant signed up", now=T0
    )
    assert (row.zone_reason, row.skipped_time, row.repeated_time) == (REASON, "skip", "both")
    out = StringIO()
    call_command("jobs", "inspect", "billing.nightly", "--actor", "root", "--json", stdout=out)
    shown = json.loads(out.getvalue())
    assert (shown["time_zone"], shown["zone_reason"]) == ("America/New_York", REASON)
    assert (shown["skipped_time"], shown["repeated_time"]) == ("skip", "both")
    assert f"Business-local: runs in America/New_York, because {REASON}." in runbooks.markdown(row)


def test_the_admin_schedule_page_shows_the_reason(client) -> None:
    root = User.objects.create_superuser("root", password="x")
    timing = cron(
        "0 9 * * *", zone="America/New_York", skipped="skip", repeated="both", reason=REASON
    )
    row = services.upsert_schedule(
        declaration(timing=timing), actor=root, reason="tenant signed up", now=T0
    )
    client.force_login(root)
    page = client.get(f"/admin/django_jobs/schedule/{row.pk}/change/").content.decode()
    assert "Reason for a non-UTC zone" in page
    assert REASON in page
