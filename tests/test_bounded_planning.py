"""Whatever a schedule row says, a plan pass is bounded: hostile rows are parked, long gaps are
planned over several short passes, and the kill switch and the replica's own jobs decide what
is planned at all.

Rows are written with the ORM, skipping the service layer, as a manual ``UPDATE``, an older
release or an attacker with database access could leave them.
"""

from __future__ import annotations

import itertools
import json
import socket
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from structlog.testing import capture_logs

from django_jobs import services, store
from django_jobs.identity import occurrence_id
from django_jobs.models import AuditRecord, Occurrence, OccurrenceState, Schedule
from django_jobs.registry import Registry
from django_jobs.scheduling.planner import (
    HEAD_WINDOW,
    MAX_CATCHUP,
    ON_TIME_LIMIT,
    SKIP_RECORD_CAP,
)
from django_jobs.scheduling.policies import MAX_DURATION
from django_jobs.worker.loop import Worker
from django_jobs.worker.planning import plan_due

from .factories import T0, ScheduleFactory, declaration

pytestmark = pytest.mark.django_db

PER_MINUTE = {"timing_kind": "cron", "interval": None, "anchor": None, "cron": "* * * * *"}
EVERY_SECOND = {"interval": timedelta(seconds=1), "anchor": datetime(1970, 1, 1, tzinfo=UTC)}
MiB = 1024 * 1024


def peak_memory(action: Callable[[], Any]) -> tuple[Any, int]:
    """What ``action`` returns, and the most memory Python held for it at once (bytes)."""
    tracemalloc.start()
    try:
        result = action()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def plan_until_caught_up(schedule: Schedule, *, now: datetime, passes: int = 100) -> list[Any]:
    """Plan passes until ``schedule`` is due in the future; each pass's (result, peak memory)."""
    done = []
    for _ in range(passes):
        done.append(peak_memory(lambda: plan_due(now=now)))
        schedule.refresh_from_db()
        if schedule.next_due_at is None or schedule.next_due_at > now:
            return done
    raise AssertionError(f"{schedule} not caught up after {passes} passes")


def summarised(schedule: Schedule) -> int:
    records = AuditRecord.objects.filter(action="misfire.skipped", target_id=str(schedule.pk))
    return sum(r.after["count"] for r in records)


@pytest.mark.slow
def test_a_year_long_per_minute_gap_is_planned_in_bounded_passes() -> None:
    """A per-minute cron disabled for a year and enabled again: every missed minute is
    accounted for, over passes that each count at most a month of the gap, in bounded
    memory, and the schedule ends due at its next minute."""
    year = ScheduleFactory.create(
        key="year",
        **PER_MINUTE,
        misfire="skip",
        max_delay=timedelta(minutes=5),
        created_at=T0 - timedelta(days=400),
        last_scheduled_at=T0 - timedelta(days=365),
        next_due_at=T0,
    )
    recovery_points: list[datetime] = [T0 - timedelta(days=365)]
    passes: list[tuple[Any, int]] = []
    while year.next_due_at is not None and year.next_due_at <= T0 and len(passes) < 100:
        passes.append(peak_memory(lambda: plan_due(now=T0)))
        year.refresh_from_db()
        assert year.last_scheduled_at is not None
        recovery_points.append(year.last_scheduled_at)

    assert len(passes) >= 365 // HEAD_WINDOW.days
    steps = [b - a for a, b in itertools.pairwise(recovery_points)]
    assert max(steps[:-1]) <= HEAD_WINDOW  # every pass but the last counts at most a month
    assert all(result.more == 1 for result, _ in passes[:-1])
    assert passes[-1][0].more == 0
    assert max(peak for _, peak in passes) < 10 * MiB
    # Every minute after the recovery point up to now is accounted for: summarised, skipped
    # with a row, or planned to run.
    minutes = 365 * 24 * 60
    rows = Occurrence.objects.filter(schedule=year)
    skipped = rows.filter(state=OccurrenceState.SKIPPED).count()
    on_time = rows.filter(state=OccurrenceState.SCHEDULED).count()
    assert skipped == SKIP_RECORD_CAP
    assert on_time == 6  # T0 and the five minutes before it are within max_delay
    assert summarised(year) + skipped + on_time == minutes
    assert year.next_due_at == T0 + timedelta(minutes=1)


@pytest.mark.slow
def test_more_on_time_instants_than_one_pass_plans_are_planned_by_the_next_passes() -> None:
    """Six hours of a per-second schedule, all within its max_delay: 21,600 instants, planned
    10,000 per pass, none lost, none twice."""
    busy = ScheduleFactory.create(
        key="busy",
        **EVERY_SECOND,
        max_delay=timedelta(days=1),
        created_at=T0 - timedelta(hours=6),
        next_due_at=T0,
    )
    passes = plan_until_caught_up(busy, now=T0)

    assert [result.planned for result, _ in passes] == [ON_TIME_LIMIT, ON_TIME_LIMIT, 1601]
    instants = list(
        Occurrence.objects.filter(schedule=busy)
        .order_by("scheduled_at")
        .values_list("scheduled_at", flat=True)
    )
    assert instants == [T0 - timedelta(seconds=s) for s in range(6 * 3600, -1, -1)]


def test_a_hostile_max_catchup_row_is_parked_without_listing_its_instants() -> None:
    """The review's row: every second, replay all, a cap of 2^31-1, ten days missed. Today it
    built 863,700 instants (139 MiB) and rolled back, at every replica in turn."""
    hostile = ScheduleFactory.create(
        key="hostile",
        **EVERY_SECOND,
        misfire="replay_all",
        max_catchup=2**31 - 1,
        max_delay=timedelta(seconds=1),
        created_at=T0 - timedelta(days=10),
        next_due_at=T0,
    )
    good = ScheduleFactory.create(key="good", next_due_at=T0, created_at=T0)

    result, peak = peak_memory(lambda: plan_due(now=T0 + timedelta(minutes=2)))

    assert result.invalid == ["hostile"]
    hostile.refresh_from_db()
    assert hostile.next_due_at is None
    assert hostile.parked_field == "max_catchup"
    assert f"from 0 to {MAX_CATCHUP}" in hostile.parked_reason
    assert hostile.parked_at == T0 + timedelta(minutes=2)
    assert not Occurrence.objects.filter(schedule=hostile).exists()
    assert Occurrence.objects.filter(schedule=good).count() == 3
    assert peak < 2 * MiB


@pytest.mark.slow
def test_a_row_claiming_to_be_created_in_1970_is_planned_in_bounded_memory() -> None:
    """A per-second schedule created (says the row) in 1970, replaying its cap: 1.7 billion
    missed instants are counted, not listed."""
    ancient = ScheduleFactory.create(
        key="ancient",
        **EVERY_SECOND,
        misfire="replay_all",
        max_catchup=MAX_CATCHUP,
        max_delay=timedelta(seconds=1),
        created_at=datetime(1970, 1, 1, tzinfo=UTC),
        next_due_at=T0,
    )

    (result, peak), *_ = plan_until_caught_up(ancient, now=T0)

    assert result.planned == MAX_CATCHUP + 2  # the cap, and the two instants on time
    missed = int((T0 - timedelta(seconds=1) - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds())
    assert summarised(ancient) + SKIP_RECORD_CAP + MAX_CATCHUP == missed
    assert peak < 40 * MiB


def test_a_per_minute_cron_claiming_1970_moves_a_month_per_pass() -> None:
    ancient = ScheduleFactory.create(
        key="ancient-cron",
        **PER_MINUTE,
        misfire="replay_once",
        max_delay=timedelta(minutes=5),
        created_at=datetime(1970, 1, 1, tzinfo=UTC),
        next_due_at=T0,
    )
    for _ in range(3):
        result, peak = peak_memory(lambda: plan_due(now=T0))
        assert result.more == 1
        assert peak < 10 * MiB
    ancient.refresh_from_db()
    assert ancient.last_scheduled_at == datetime(1970, 1, 1, tzinfo=UTC) + 3 * HEAD_WINDOW - (
        timedelta(microseconds=1)
    )
    assert ancient.next_due_at == T0  # due again at once: the next pass goes on
    assert summarised(ancient) == 3 * HEAD_WINDOW.days * 24 * 60
    assert not Occurrence.objects.filter(schedule=ancient).exists()


REFUSED_ROWS: dict[str, tuple[dict[str, Any], str, str]] = {
    "cap-just-over": ({"max_catchup": MAX_CATCHUP + 1}, "max_catchup", "from 0 to 10000"),
    "cap-huge": ({"max_catchup": 2**31 - 1}, "max_catchup", "from 0 to 10000"),
    "delay-beyond-a-century": (
        {"max_delay": MAX_DURATION + timedelta(days=1)},
        "max_delay",
        "a positive timedelta of at most 36525 days",
    ),
    "created-in-the-future": (
        {"created_at": T0 + timedelta(days=2)},
        "created_at",
        "is in the future",
    ),
    "last-planned-in-the-future": (
        {"last_scheduled_at": datetime(2990, 1, 1, tzinfo=UTC)},
        "last_scheduled_at",
        "would plan nothing until then",
    ),
    "bad-zone": ({**PER_MINUTE, "time_zone": "Mars/Base"}, "timing.zone", "Mars/Base"),
    "bad-misfire": ({"misfire": "retry_forever"}, "misfire", "'retry_forever'"),
}


@pytest.mark.parametrize("name", list(REFUSED_ROWS))
def test_a_refused_row_is_parked_naming_the_field_and_the_others_are_planned(name: str) -> None:
    fields, field, says = REFUSED_ROWS[name]
    good = ScheduleFactory.create(key="good", next_due_at=T0, created_at=T0)
    bad = ScheduleFactory.create(key=name, next_due_at=T0, **{"created_at": T0, **fields})

    with capture_logs() as logs:
        result = plan_due(now=T0 + timedelta(minutes=2))

    assert result.invalid == [name]
    assert Occurrence.objects.filter(schedule=good).count() == 3
    assert not Occurrence.objects.filter(schedule=bad).exists()
    bad.refresh_from_db()
    assert (bad.next_due_at, bad.parked_field) == (None, field)
    assert says in bad.parked_reason
    (event,) = [e for e in logs if e["event"] == "schedule.invalid"]
    assert (event["schedule"], event["field"]) == (name, field)


def test_a_pass_over_its_time_budget_leaves_the_rest_due_for_the_next() -> None:
    schedules = [
        ScheduleFactory.create(key=f"s{n}", next_due_at=T0 + timedelta(seconds=n), created_at=T0)
        for n in range(5)
    ]
    result = plan_due(now=T0 + timedelta(minutes=1), budget_seconds=0)

    assert (result.schedules, result.more) == (5, 4)
    due = Schedule.objects.filter(next_due_at__lte=T0 + timedelta(minutes=1)).order_by("key")
    assert [s.key for s in due] == ["s1", "s2", "s3", "s4"]  # untouched, first in the next pass
    assert Occurrence.objects.filter(schedule=schedules[0]).count() == 2
    assert plan_due(now=T0 + timedelta(minutes=1), budget_seconds=0).schedules == 4


# --- The worker: the kill switch, its own jobs, forged occurrences ------------------------


@pytest.fixture
def worker(jobs: Registry, inline_worker) -> Callable[..., Worker]:
    """An inline worker, with this test's jobs unless given others."""
    return lambda registry=jobs: inline_worker(registry)


@pytest.mark.parametrize("paused", [["acme/*"], ["acme/report"], ["report"], ["*"]])
def test_the_kill_switch_stops_planning_of_the_schedules_it_names(
    paused: list[str], worker, clock
) -> None:
    clock.set(T0)
    report = ScheduleFactory.create(tenant="acme", key="report", next_due_at=T0, created_at=T0)
    other = ScheduleFactory.create(tenant="globex", key="other", next_due_at=T0, created_at=T0)

    with override_settings(DJANGO_JOBS={"PAUSED_SCHEDULES": paused}):
        worker().run_pass()

    assert not Occurrence.objects.filter(schedule=report).exists()
    report.refresh_from_db()
    assert report.next_due_at == T0  # left due, not parked: planned once the switch is off
    assert Occurrence.objects.filter(schedule=other).exists() == (paused != ["*"])
    worker().run_pass()
    assert Occurrence.objects.filter(schedule=report).exists()


def test_a_paused_replica_does_not_wake_for_work_it_may_not_take(worker, clock) -> None:
    """The next wake-up leaves out what the kill switch names: a replica sleeps until its
    poll instead of waking at once, again and again, for due work it then leaves."""
    clock.set(T0)
    ScheduleFactory.create(tenant="acme", key="report", next_due_at=T0, created_at=T0)
    worker().run_pass()  # planned and run: the occurrence of the next minute waits
    later = T0 + timedelta(minutes=10)
    paused = ["acme/report"]

    due = store.next_wakeup(now=later)
    assert due is not None
    assert due <= later  # due now: without the switch, wake
    assert store.next_wakeup(now=later, exclude_keys=paused) is None
    assert store.next_schedule_due(exclude_keys=paused) is None
    assert store.next_schedule_due(jobs=["tests.other"]) is None


def test_an_occurrence_whose_tenant_is_not_its_schedules_is_never_run(worker, clock, ran) -> None:
    clock.set(T0)
    acme = ScheduleFactory.create(tenant="acme", key="report", next_due_at=None, created_at=T0)
    forged_id = occurrence_id("globex", "report", T0)
    Occurrence.objects.create(
        id=forged_id, schedule=acme, tenant="globex", scheduled_at=T0, due_at=T0
    )

    with capture_logs() as logs:
        worker().run_pass()

    assert ran == []
    forged = Occurrence.objects.get(pk=forged_id)
    assert forged.state == OccurrenceState.DEAD
    assert forged.last_error_type == store.TENANT_MISMATCH
    assert "'globex'" in forged.last_error_message
    assert "'acme'" in forged.last_error_message
    assert not forged.attempt_history.exists()
    assert [e["occurrence"] for e in logs if e["event"] == "occurrence.refused"] == [str(forged_id)]


def test_a_replica_plans_only_schedules_whose_job_it_has(worker, clock, ran) -> None:
    """In a rolling deploy an old replica leaves a new job's schedule to the replicas that
    have it; one that no replica plans for a while is parked, saying which job and where,
    and taken up again by the first replica that has the job."""
    clock.set(T0)
    newer = ScheduleFactory.create(key="newer", job="tests.newer", next_due_at=T0, created_at=T0)
    old = worker()

    old.run_pass()
    newer.refresh_from_db()
    assert not Occurrence.objects.filter(schedule=newer).exists()
    assert (newer.next_due_at, newer.parked_field) == (T0, "")  # left due for another replica

    clock.advance(timedelta(minutes=2))
    with capture_logs() as logs:
        old.run_pass()
    newer.refresh_from_db()
    assert (newer.next_due_at, newer.parked_field) == (None, "job")
    assert "'tests.newer'" in newer.parked_reason
    assert "replica-1" in newer.parked_reason
    assert [e["schedule"] for e in logs if e["event"] == "schedule.invalid"] == ["newer"]

    upgraded = Registry()
    upgraded.register("tests.newer", lambda run: ran.append(run.occurrence_key))
    worker(upgraded).run_pass()
    newer.refresh_from_db()
    assert newer.parked_field == ""
    assert newer.next_due_at == T0 + timedelta(minutes=3)
    assert len(ran) == 3  # T0, T0+1min, T0+2min: nothing was lost while it was parked


# --- A parked schedule: seen by operators, checked again once its record is written -------


def test_a_parked_schedule_is_checked_again_when_its_record_is_written_again(capsys) -> None:
    root = User.objects.create_superuser("root", "root@example.com", "x")
    declared = declaration("billing.nightly")
    services.sync_schedules([declared], now=T0)
    nightly = Schedule.objects.get(key="billing.nightly")
    # Behind the service layer's back:
    Schedule.objects.filter(pk=nightly.pk).update(max_catchup=2**31 - 1, next_due_at=T0)
    plan_due(now=T0)
    nightly.refresh_from_db()
    assert (nightly.next_due_at, nightly.parked_field) == (None, "max_catchup")

    beat("r1")
    call_command("jobs", "health")
    assert (
        "parked: billing.nightly (max_catchup): RefusedRow: max_catchup:" in capsys.readouterr().out
    )
    call_command("jobs", "inspect", "billing.nightly", "--actor", "root", "--json")
    assert json.loads(capsys.readouterr().out)["parked"]["field"] == "max_catchup"

    # Enabling it asks the planner again: it is still refused, so it is parked again.
    services.enable(nightly, actor=root, reason="try the record again", now=T0)
    nightly.refresh_from_db()
    assert (nightly.next_due_at, nightly.parked_field) == (T0, "")
    enabled = AuditRecord.objects.get(action="enable")
    assert enabled.before["parked"].startswith("max_catchup: RefusedRow")
    plan_due(now=T0)
    nightly.refresh_from_db()
    assert nightly.parked_field == "max_catchup"

    # The declaration written again restores the cap: planned from the next pass on.
    report = services.sync_schedules([declared], now=T0 + timedelta(minutes=1))
    assert report.updated == ["billing.nightly"]
    nightly.refresh_from_db()
    assert (nightly.max_catchup, nightly.parked_field) == (100, "")
    plan_due(now=T0 + timedelta(minutes=1))
    nightly.refresh_from_db()
    assert nightly.parked_field == ""
    assert nightly.next_due_at is not None
    assert nightly.next_due_at > T0


def beat(replica_id: str) -> None:
    store.heartbeat(
        replica_id,
        host=socket.gethostname(),
        pid=1,
        started_at=T0,
        now=store.database_clock(),
        state="running",
        concurrency=1,
        running=0,
    )


# --- Values PostgreSQL holds and Python cannot --------------------------------------------

UNREADABLE = {
    "max_delay": "interval '100000000 years'",
    "anchor": "'infinity'",
    "timeout": "interval '5000000 years'",
    "created_at": "'-infinity'",
    "next_due_at": "'-infinity'",
}


@pytest.mark.parametrize("column", list(UNREADABLE))
def test_a_value_python_cannot_hold_parks_its_schedule_and_fails_no_pass(
    column: str, worker, clock, ran
) -> None:
    """Loading such a row raised DataError in the pass that read it: every pass of every
    replica failed, so nothing was planned or claimed anywhere."""
    clock.set(T0)
    good = ScheduleFactory.create(key="good", next_due_at=T0, created_at=T0)
    bad = ScheduleFactory.create(key="bad", next_due_at=T0, created_at=T0)
    plan_due(now=T0)  # an occurrence of each, due now: the claim loads bad's too
    clock.set(T0 + timedelta(minutes=1))
    values = {"next_due_at": "%s", column: UNREADABLE[column]}
    assignments = ", ".join(f"{name} = {value}" for name, value in values.items())
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE django_jobs_schedule SET {assignments} WHERE id = %s",
            [T0, bad.pk] if column != "next_due_at" else [bad.pk],
        )

    with capture_logs() as logs:
        worker().run_pass()

    invalid = [(e["schedule"], e["field"]) for e in logs if e["event"] == "schedule.invalid"]
    assert invalid == [("bad", column)]
    field, reason = (
        Schedule.objects.filter(pk=bad.pk).values_list("parked_field", "parked_reason").get()
    )
    assert field == column
    assert "beyond what the worker can read" in reason
    done = Occurrence.objects.filter(schedule=good, state=OccurrenceState.COMPLETED)
    assert done.count() == 2  # the other schedule planned and ran as usual
    assert store.next_wakeup(now=clock.now()) is not None  # answers, no DataError


def test_a_forged_occurrence_already_missed_is_refused_not_fed_to_the_misfire_policy(
    worker, clock, ran
) -> None:
    clock.set(T0)
    acme = ScheduleFactory.create(
        tenant="acme", key="report", next_due_at=T0, created_at=T0, max_delay=timedelta(minutes=5)
    )
    long_ago = T0 - timedelta(hours=1)
    forged_id = occurrence_id("globex", "report", long_ago)
    Occurrence.objects.create(
        id=forged_id, schedule=acme, tenant="globex", scheduled_at=long_ago, due_at=long_ago
    )

    assert store.planning_context([acme], now=T0).missed == {}
    worker().run_pass()

    forged = Occurrence.objects.get(pk=forged_id)
    assert (forged.state, forged.last_error_type) == (OccurrenceState.DEAD, store.TENANT_MISMATCH)
    assert not forged.attempt_history.exists()
    assert len(ran) == 1  # T0, acme's own
