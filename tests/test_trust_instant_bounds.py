"""Issue #33, finding 4 (the entry half): far instants are refused where they enter, each
refusal naming its field.

On 8f518d8 a one-off at 9999-12-31 or 0001-01-01 (console form, ``upsert_schedule``), an
``enqueue(at=9999-...)``, an ``enqueue(after=<a million years>)`` (clamped to 9998) and a
``jobs replay KEY --at 0001-...`` were accepted, and the admin then overflowed rendering them.
Every entry point now asks one function, ``scheduling.timing.check_instant``: an instant is
from 1970-01-01 to before 2200-01-01 UTC. Instants near the window's ends still work, and
what a worker adds to them (a century's timeout or backoff) does not overflow.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from django_jobs import InvalidSchedule, JobsError, Retry, after, at, enqueue, every, services
from django_jobs.clock import use_clock
from django_jobs.models import AuditRecord, Occurrence, OccurrenceState, Schedule
from django_jobs.registry import JobPolicies
from django_jobs.scheduling import rrules
from django_jobs.scheduling.policies import MAX_DURATION
from django_jobs.testing import FakeClock, run_due
from django_jobs.worker.planning import plan_due
from tests.workerapp import tasks

from .console_forms import form_data as console_form
from .factories import T0, ScheduleFactory, declaration

pytestmark = pytest.mark.django_db

WINDOW = "must be from 1970-01-01 to before 2200-01-01 UTC"
LAST_SECOND = datetime(2199, 12, 31, 23, 59, 59, tzinfo=UTC)  # the last the window holds
FIRST_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
# The ends of the calendar, and past them once in UTC (year 1 east of UTC, 9999 west of it).
FAR = {
    "9999-12-31": datetime(9999, 12, 31, tzinfo=UTC),
    "0001-01-01": datetime(1, 1, 1, tzinfo=UTC),
    "0001-01-01+05:00": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))),
    "9999-12-31T23:00-05:00": datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))),
}
HUGE_DELAY = timedelta(days=999_999_999)


def upsert(root: User, **fields: Any) -> Schedule:
    return services.upsert_schedule(
        declaration("acme.once", tenant="acme", **fields), actor=root, reason="edge", now=T0
    )


# --- the service layer: upsert_schedule ---------------------------------------------------


@pytest.mark.parametrize("instant", list(FAR.values()), ids=list(FAR))
def test_a_one_off_at_the_ends_of_the_calendar_is_refused_naming_at(root, instant) -> None:
    with pytest.raises(InvalidSchedule) as refused:
        upsert(root, timing=at(instant))
    assert refused.value.field == "timing.at"
    assert WINDOW in str(refused.value)
    assert not Schedule.objects.exists()
    assert not AuditRecord.objects.exists()


@pytest.mark.parametrize("instant", list(FAR.values()), ids=list(FAR))
def test_an_interval_anchored_at_the_ends_of_the_calendar_is_refused_naming_anchor(
    root, instant
) -> None:
    with pytest.raises(InvalidSchedule) as refused:
        upsert(root, timing=every(timedelta(hours=1), anchor=instant))
    assert refused.value.field == "timing.anchor"
    assert WINDOW in str(refused.value)
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(
    ("rule", "part"),
    [
        ("DTSTART:25000101T000000\nRRULE:FREQ=DAILY", "DTSTART"),
        ("FREQ=DAILY;UNTIL=99991231T000000", "UNTIL"),
        ("DTSTART:19600101T000000\nRRULE:FREQ=DAILY", "DTSTART"),
    ],
)
def test_a_calendar_rule_starting_or_ending_outside_the_window_is_refused(root, rule, part) -> None:
    with pytest.raises(InvalidSchedule) as refused:
        upsert(root, timing=rrules.rrule(rule))
    assert refused.value.field == "timing.rrule"
    assert f"{part} {WINDOW} (as a local date-time)" in str(refused.value)
    assert not Schedule.objects.exists()


def test_a_delay_beyond_a_century_is_refused_naming_after(root) -> None:
    with pytest.raises(InvalidSchedule) as refused:
        upsert(root, timing=after(HUGE_DELAY))
    assert refused.value.field == "timing.after"
    assert "at most 36525 days" in str(refused.value)
    assert not Schedule.objects.exists()


def test_instants_at_the_windows_ends_and_a_century_after_are_accepted(root) -> None:
    assert upsert(root, timing=at(LAST_SECOND)).run_at == LAST_SECOND
    anchored = upsert(root, timing=every(timedelta(hours=1), anchor=FIRST_INSTANT))
    assert anchored.anchor == FIRST_INSTANT
    assert upsert(root, timing=after(MAX_DURATION)).run_at == T0 + MAX_DURATION
    rule = "DTSTART:21991231T000000\nRRULE:FREQ=DAILY;UNTIL=21991231T235959"
    assert upsert(root, timing=rrules.rrule(rule)).rrule == rule


def test_a_far_row_written_behind_the_service_layer_is_parked_naming_at() -> None:
    """A row the service layer would refuse (a migration, a manual UPDATE): the plan pass
    parks it naming the field, and plans the others."""
    good = ScheduleFactory.create(key="good", next_due_at=T0, created_at=T0)
    far = ScheduleFactory.create(
        key="far",
        next_due_at=T0,
        timing_kind="at",
        interval=None,
        anchor=None,
        run_at=FAR["9999-12-31"],
    )
    result = plan_due(now=T0 + timedelta(minutes=1))
    assert result.invalid == ["far"]
    far.refresh_from_db()
    assert far.parked_field == "timing.at"
    assert WINDOW in far.parked_reason
    assert Occurrence.objects.filter(schedule=good).count() == 2


# --- the service layer: enqueue(at=, after=) ------------------------------------------------


# A century's timeout and backoff: the most a job's policies may name (MAX_DURATION).
CENTURY_POLICIES = JobPolicies(
    retry=Retry(max_attempts=2, backoff=MAX_DURATION, max_backoff=MAX_DURATION),
    timeout=MAX_DURATION,
    retention=timedelta(days=2),
    priority=0,
    owner="team-billing",
)


@pytest.fixture
def send(registered) -> str:
    registered("t.send", lambda run: None, policies=CENTURY_POLICIES)
    return "t.send"


@pytest.mark.parametrize("instant", list(FAR.values()), ids=list(FAR))
def test_enqueue_at_the_ends_of_the_calendar_is_refused_naming_at(clock, send, instant) -> None:
    with use_clock(clock), pytest.raises(JobsError) as refused:
        enqueue(send, at=instant)
    assert str(refused.value).startswith(f"enqueue of job 't.send': at: {WINDOW}")
    assert not Occurrence.objects.exists()


def test_enqueue_after_a_delay_beyond_a_century_is_refused_naming_after(clock, send) -> None:
    """On 8f518d8 the delay was clamped: the work was enqueued for 9998-12-31."""
    with use_clock(clock), pytest.raises(JobsError) as refused:
        enqueue(send, after=HUGE_DELAY)
    assert str(refused.value).startswith("enqueue of job 't.send': after: ")
    assert "at most 36525 days" in str(refused.value)
    assert not Occurrence.objects.exists()


def test_enqueue_after_from_a_clock_past_the_window_is_refused_naming_after(send) -> None:
    late = FakeClock(datetime(9990, 1, 1, tzinfo=UTC))
    with use_clock(late), pytest.raises(JobsError, match=r"^enqueue of job 't\.send': after: "):
        enqueue(send, after=MAX_DURATION)  # year 10090: past what a datetime holds
    assert not Occurrence.objects.exists()


def test_a_task_run_after_the_end_of_the_calendar_is_refused_naming_at(clock) -> None:
    """The Tasks backend's ``run_after`` enqueues through the same service."""
    with use_clock(clock), pytest.raises(JobsError, match=re.escape(f"at: {WINDOW}")):
        tasks.add.using(run_after=FAR["9999-12-31"]).enqueue(1, 2)
    assert not Occurrence.objects.exists()


def test_work_at_the_windows_last_second_runs_and_a_century_backoff_does_not_overflow(
    send, registered
) -> None:
    """The window leaves headroom: a lease of a century's timeout and a retry a century's
    backoff later are computed from the last instant the window holds."""

    def fail(run: Any) -> None:
        raise RuntimeError("partner down")

    registered("t.fail", fail, policies=CENTURY_POLICIES)
    clock = FakeClock(T0)
    with use_clock(clock):
        last = enqueue("t.fail", at=LAST_SECOND)
        first = enqueue(send, at=FIRST_INSTANT)
    assert last.occurrence().scheduled_at == LAST_SECOND
    assert first.occurrence().scheduled_at == FIRST_INSTANT
    clock.set(FIRST_INSTANT)
    with use_clock(clock):
        run_due(clock)
    assert first.occurrence().state == OccurrenceState.COMPLETED
    clock.set(LAST_SECOND)
    with use_clock(clock):
        run_due(clock)
    failed = last.occurrence()
    assert failed.state == OccurrenceState.FAILED
    # Backoff with jitter in [0.5, 1]: decades past 2200, computed, not clamped to 9998.
    assert LAST_SECOND + MAX_DURATION / 2 <= failed.due_at <= LAST_SECOND + MAX_DURATION


# --- the console's schedule form, through the test client -----------------------------------


def form_data(**fields: str) -> dict[str, str]:
    """The console's form for a one-off (``timing_kind`` at unless ``fields`` say), no cron."""
    data = console_form(**{"key": "acme.once", "timing_kind": "at", "reason": "one-off", **fields})
    del data["cron"]
    return data


def post_form(root: User, **fields: str) -> Any:
    client = Client()
    client.force_login(root)
    with use_clock(FakeClock(T0)):
        return client.post(reverse("admin:django_jobs_schedule_add"), form_data(**fields))


def field_errors(response: Any, field: str) -> str:
    """The text of the form row of ``field`` (its errors are inside it)."""
    assert response.status_code == 200
    page: str = response.content.decode()
    return page.split(f'class="form-row field-{field}"')[1].split("</div>")[0]


@pytest.mark.parametrize(
    "text", ["9999-12-31T00:00", "0001-01-01T00:00", "0001-01-01T00:00+05:00", "1969-12-31T23:59Z"]
)
def test_the_form_refuses_a_one_off_outside_the_window_on_run_at(root, text) -> None:
    response = post_form(root, run_at=text)
    assert f"timing.at: {WINDOW}" in field_errors(response, "run_at")
    assert not Schedule.objects.exists()


@pytest.mark.parametrize("text", ["9999-12-31T23:59", "0001-01-01T00:00+05:00"])
def test_the_form_refuses_an_anchor_outside_the_window_on_anchor(root, text) -> None:
    response = post_form(root, timing_kind="interval", interval="01:00:00", anchor=text)
    assert f"timing.anchor: {WINDOW}" in field_errors(response, "anchor")
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("999999999 00:00:00", "timing.after: must be a timedelta of 0 or more, at most 36525"),
        ("9999999999 00:00:00", "is not a duration"),  # more days than a timedelta holds
    ],
)
def test_the_form_refuses_a_huge_delay_on_delay(root, text, says) -> None:
    response = post_form(root, timing_kind="after", delay=text)
    assert says in field_errors(response, "delay")
    assert not Schedule.objects.exists()


def test_the_form_accepts_a_one_off_at_the_windows_last_second(root) -> None:
    response = post_form(root, run_at="2199-12-31T23:59:59Z")
    assert response.status_code == 302
    assert Schedule.objects.get(key="acme.once").run_at == LAST_SECOND


# --- the jobs command, through call_command -------------------------------------------------


def replay_cli(at_text: str) -> str:
    out = StringIO()
    call_command(
        "jobs",
        *("replay", "acme.every-minute", "--tenant", "acme", "--at", at_text),
        *("--actor", "root", "--reason", "backfill"),
        stdout=out,
    )
    return out.getvalue()


@pytest.mark.parametrize(
    "text", ["0001-01-01T00:00:00Z", "9999-12-31T00:00:00Z", "0001-01-01T00:00:00+05:00"]
)
def test_jobs_replay_at_an_instant_outside_the_window_is_refused_naming_at(root, text) -> None:
    """On 8f518d8 a minutely schedule's instant in year 1 was replayed: a row at 0001-01-01."""
    ScheduleFactory.create(tenant="acme", key="acme.every-minute")
    with use_clock(FakeClock(T0)), pytest.raises(CommandError) as refused:
        replay_cli(text)
    assert f"argument --at: {WINDOW}" in str(refused.value)
    assert not Occurrence.objects.exists()
    assert not AuditRecord.objects.exists()


@pytest.mark.parametrize("instant", [FAR["0001-01-01"], FAR["9999-12-31"]], ids=["1", "9999"])
def test_replay_at_outside_the_window_is_refused_by_the_service_naming_at(root, instant) -> None:
    schedule = ScheduleFactory.create(tenant="acme", key="acme.every-minute")
    with pytest.raises(JobsError, match=re.escape(f"at: {WINDOW}")):
        services.replay_at(schedule, at=instant, actor=root, reason="backfill", now=T0)
    assert not Occurrence.objects.exists()


def test_jobs_replay_at_an_instant_at_the_windows_start_is_replayed(root) -> None:
    ScheduleFactory.create(tenant="acme", key="acme.every-minute")
    with use_clock(FakeClock(T0)):
        replay_cli("1970-01-01T00:00:00Z")
    assert Occurrence.objects.get().scheduled_at == FIRST_INSTANT
