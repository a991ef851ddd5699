"""System checks over schedule records, each asserted with its exact id and message.

The database constraints refuse the worst records outright (no owner, a draft without a
decider); the checks catch what a constraint cannot: blank-looking values, a zone or cron
expression that does not parse, a job nobody registered, a decide-by date that has passed, a
missing retention Limit.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from django.core.checks import run_checks

from django_jobs import every, runbooks, schedule
from django_jobs.checks import check_schedule_records
from django_jobs.declarations import declared
from django_jobs.models import Limit
from django_jobs.testing import FakeClock, use_clock

from .factories import ScheduleFactory

pytestmark = pytest.mark.django_db


def db_messages() -> list[tuple[str | None, str]]:
    return [(m.id, m.msg) for m in check_schedule_records(databases=["default"])]


def record(key: str, *, limit: bool = True, **fields):
    runbook_records = fields.pop("runbooks", True)
    s = ScheduleFactory.create(key=key, job=fields.pop("job", "billing.heartbeat"), **fields)
    if limit:
        Limit.objects.create(schedule=s, keep_for=timedelta(days=7))
    if runbook_records:
        runbooks.write(s)
    return s


def test_a_complete_record_passes_every_check() -> None:
    record("fine")
    assert db_messages() == []


def test_e010_record_without_an_owner() -> None:
    record("orphan", operating_owner="   ")
    assert db_messages() == [
        (
            "django_jobs.E010",
            "Schedule 'orphan': operating_owner: is required: 1-200 printable characters "
            "naming who runs it in production.",
        )
    ]


def test_e011_draft_without_decider() -> None:
    record("undecided", status="draft", decider=" ", decide_by=date(2099, 1, 1))
    assert db_messages() == [
        (
            "django_jobs.E011",
            "Schedule 'undecided' is a draft without a decider and a decide-by date.",
        )
    ]


def test_e012_draft_whose_decide_by_date_has_passed() -> None:
    record("overdue", status="draft", decider="cfo", decide_by=date(2020, 1, 1))
    assert db_messages() == [
        (
            "django_jobs.E012",
            "Schedule 'overdue' is a draft whose decide-by date 2020-01-01 has passed.",
        )
    ]


def test_e013_zone_that_is_not_an_iana_identifier() -> None:
    record("mars", timing_kind="cron", cron="0 9 * * *", interval=None, time_zone="Mars/Base")
    assert db_messages() == [
        ("django_jobs.E013", "Schedule 'mars': time zone 'Mars/Base' is not an IANA identifier.")
    ]


def test_e014_job_that_no_handler_registered() -> None:
    record("ghost", job="billing.no_such_job")
    assert db_messages() == [
        (
            "django_jobs.E014",
            "Schedule 'ghost': no handler is registered for job 'billing.no_such_job'.",
        )
    ]


def test_e015_invalid_cron_expression() -> None:
    record("bad-cron", timing_kind="cron", cron="61 * * * *", interval=None)
    assert db_messages() == [
        (
            "django_jobs.E015",
            "Schedule 'bad-cron': '61 * * * *' is not a valid cron expression: cron field "
            "'minute' is '61': must be 0-59.",
        )
    ]


def test_e016_active_record_without_a_retention_limit() -> None:
    record("forever", limit=False)
    assert db_messages() == [("django_jobs.E016", "Schedule 'forever' has no retention Limit.")]


def test_e017_active_record_without_its_runbooks() -> None:
    record("undocumented", runbooks=False)
    assert db_messages() == [
        (
            "django_jobs.E017",
            "Schedule 'undocumented' lacks its inspection, replay and disable Runbook records.",
        )
    ]


def test_retired_records_are_not_checked() -> None:
    record("old", status="retired", job="billing.gone", limit=False)
    assert db_messages() == []


def test_declared_schedules_are_checked_without_a_database(monkeypatch) -> None:
    monkeypatch.setattr(declared, "_items", {})
    schedule(
        "tests.unhandled",
        job="tests.nobody",
        timing=every(timedelta(minutes=5)),
        operating_owner="team",
        record_owner="ops@example.com",
        status="active",
        retention=timedelta(days=1),
    )
    found = [(m.id, m.msg) for m in run_checks() if (m.id or "").startswith("django_jobs.E01")]
    assert found == [
        (
            "django_jobs.E014",
            "Schedule 'tests.unhandled': no handler is registered for job 'tests.nobody'.",
        )
    ]


def test_hints_say_what_to_do() -> None:
    record("ghost", job="billing.no_such_job")
    (message,) = check_schedule_records(databases=["default"])
    assert message.hint == (
        'Register one with @job("billing.no_such_job") in the jobs.py of the app that owns the '
        "behaviour."
    )
    assert message.obj.key == "ghost"


def test_e012_is_decided_by_the_injected_clocks_date() -> None:
    record("pending", status="draft", decider="cfo", decide_by=date(2026, 3, 10))
    with use_clock(FakeClock(datetime(2026, 3, 10, 23, 59, tzinfo=UTC))):
        assert db_messages() == []
    with use_clock(FakeClock(datetime(2026, 3, 11, tzinfo=UTC))):
        assert db_messages() == [
            (
                "django_jobs.E012",
                "Schedule 'pending' is a draft whose decide-by date 2026-03-10 has passed.",
            )
        ]
