"""Check ``django_jobs.W031`` and ``jobs health``: an active schedule that nothing will run
(no next due instant, no occurrence that will run) is reported, named by key and tenant, with
what to do; a schedule that will run, or has nothing left to run, is not."""

from __future__ import annotations

import json
import socket
from datetime import timedelta

import pytest
from django.core.checks import Warning
from django.core.management import call_command

from django_jobs import store
from django_jobs.checks import check_stranded_schedules
from django_jobs.models import Occurrence, OccurrenceState, Schedule
from django_jobs.testing import FakeClock, use_clock

from .factories import T0, ScheduleFactory
from .storeutil import plan

pytestmark = pytest.mark.django_db

NOW = T0 + timedelta(hours=1)
INSTANT = T0 - timedelta(minutes=30)
ENABLE = "Run manage.py jobs enable {key}{tenant} --actor <user> --reason <why>: the planner "
ENABLE += "looks at it again and its misfire policy decides what it missed (a one-off's "
ENABLE += "instant too). If its timing has no more instants (a calendar rule past its UNTIL or "
ENABLE += "COUNT), retire it instead."


def checked() -> list[tuple[str | None, str, str | None]]:
    with use_clock(FakeClock(NOW)):
        return [(m.id, m.msg, m.hint) for m in check_stranded_schedules(databases=["default"])]


def one_off(key: str = "acme.first-statement", **fields) -> Schedule:
    """An ``at`` one-off made after its instant, as the old code left it: nothing planned,
    nothing due (the row written directly)."""
    return ScheduleFactory.create(
        **{
            "key": key,
            "tenant": "acme",
            "timing_kind": "at",
            "interval": None,
            "anchor": None,
            "run_at": INSTANT,
            "max_delay": timedelta(hours=1),
            "created_at": T0,
            "next_due_at": None,
            **fields,
        }
    )


def test_w031_reports_a_one_off_whose_instant_was_never_planned() -> None:
    one_off()
    assert checked() == [
        (
            "django_jobs.W031",
            "Schedule 'acme/acme.first-statement' (key 'acme.first-statement', tenant 'acme') "
            "is stranded: it is active but has no next due instant and no occurrence that will "
            "run, so nothing will run it (its one-off instant 2026-03-01T11:30:00+00:00 was "
            "never planned).",
            ENABLE.format(key="acme.first-statement", tenant=" --tenant acme"),
        )
    ]


def test_w031_is_a_warning_so_migrate_is_not_blocked() -> None:
    one_off()
    with use_clock(FakeClock(NOW)):
        (message,) = check_stranded_schedules(databases=["default"])
    assert type(message) is Warning


def test_w031_reports_a_recurring_schedule_with_no_next_due_instant() -> None:
    ScheduleFactory.create(key="heartbeat", next_due_at=None)
    assert [(i, m.split(" (key")[0], h) for i, m, h in checked()] == [
        ("django_jobs.W031", "Schedule 'heartbeat'", ENABLE.format(key="heartbeat", tenant=""))
    ]
    assert "(no plan pass will look at it)" in checked()[0][1]


def test_w031_reports_a_missed_occurrence_no_plan_pass_will_decide() -> None:
    schedule = one_off(created_at=T0 - timedelta(hours=2), last_scheduled_at=INSTANT)
    plan(schedule, INSTANT, now=INSTANT)  # planned on time, then no replica ran for an hour
    [(_, message, _)] = checked()
    assert message.endswith(
        "(its occurrence missed its max_delay before it started and waits for a plan pass)."
    )


def test_w031_says_nothing_of_schedules_that_will_run_or_are_done() -> None:
    ScheduleFactory.create(key="healthy", next_due_at=NOW)
    pending = one_off("pending", run_at=NOW - timedelta(minutes=5), created_at=T0)
    plan(pending, NOW - timedelta(minutes=5), now=NOW)  # on time: a claim will take it
    done = one_off("done", created_at=T0 - timedelta(hours=2))
    plan(done, INSTANT, now=INSTANT)
    Occurrence.objects.filter(schedule=done).update(state=OccurrenceState.COMPLETED)
    one_off("disabled", enabled=False, disabled_by="ops", disabled_reason="x", disabled_at=T0)
    one_off("parked", parked_field="timing.at", parked_reason="InvalidTiming: ...")
    one_off("draft", status="draft", decider="ops", decide_by=T0.date())
    one_off("retired", status="retired")
    enqueued = {"timing_kind": "enqueued", "origin": "enqueue", "interval": None, "anchor": None}
    ScheduleFactory.create(key="@t.send", **enqueued)
    assert checked() == []


def test_jobs_health_lists_stranded_schedules_with_what_to_do(capsys) -> None:
    one_off()
    store.heartbeat(
        "r1",
        host=socket.gethostname(),
        pid=1234,
        started_at=NOW,
        now=NOW,
        state="running",
        concurrency=1,
        running=0,
    )
    with use_clock(FakeClock(NOW)):
        call_command("jobs", "health")
        text = capsys.readouterr().out
        call_command("jobs", "health", "--json")
    assert (
        "stranded: acme/acme.first-statement: its one-off instant 2026-03-01T11:30:00+00:00 was "
        "never planned. Run manage.py jobs enable acme.first-statement --tenant acme " in text
    )
    report = json.loads(capsys.readouterr().out.split("\nhealthy")[0])
    assert report["stranded"] == [
        {
            "schedule": "acme/acme.first-statement",
            "tenant": "acme",
            "key": "acme.first-statement",
            "why": "its one-off instant 2026-03-01T11:30:00+00:00 was never planned",
        }
    ]
    assert report["healthy"] is True  # a liveness probe: a stranded record is not a replica's


def test_what_w031_says_to_do_resolves_it(django_user_model) -> None:
    one_off()
    django_user_model.objects.create_superuser("ops")
    enable = ["jobs", "enable", "acme.first-statement", "--tenant", "acme", "--actor", "ops"]
    with use_clock(FakeClock(NOW)):
        call_command(*enable, "--reason", "W031: a one-off the old release left stranded")
    assert checked() == []
    # Later than its max_delay by then: the misfire policy (skip) recorded it skipped.
    (occurrence,) = Occurrence.objects.all()
    assert (occurrence.scheduled_at, occurrence.state) == (INSTANT, OccurrenceState.SKIPPED)
