"""Records that keep themselves: purge with steps, automatic retention, one-offs that retire
and go away, consumed declared one-offs, and the health report of retention."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import psycopg
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from guardian.models import UserObjectPermission
from guardian.shortcuts import assign_perm

from django_jobs import after, at, services, store
from django_jobs.conf import get_settings
from django_jobs.exceptions import JobsError
from django_jobs.models import (
    Attempt,
    AuditRecord,
    ConsumedOneOff,
    Limit,
    Occurrence,
    OccurrenceState,
    RetentionState,
    Runbook,
    Schedule,
    ScheduleStatus,
    Step,
)
from django_jobs.registry import Registry
from django_jobs.safe_error import SafeError
from django_jobs.testing import run_due
from django_jobs.worker import retention

from .factories import T0, ScheduleFactory, declaration, jobs_with_steps, retention_pass
from .processes import database_url
from .storeutil import claim, plan

pytestmark = pytest.mark.django_db


def run_minutes(schedule: Schedule, clock, minutes: int, jobs: Registry) -> None:
    for _ in range(minutes):
        run_due(clock, jobs=jobs)
        clock.advance(timedelta(minutes=1))


# --- purge: complete and atomic -----------------------------------------------------------


def test_purge_of_a_schedule_with_steps_deletes_them_and_leaves_no_orphans(root, clock) -> None:
    clock.set(T0)
    schedule = ScheduleFactory.create(job="tests.stepped", next_due_at=T0)
    Limit.objects.create(schedule=schedule, keep_last=2)
    run_minutes(schedule, clock, 5, jobs_with_steps())
    assert Step.objects.count() == Occurrence.objects.count() == 5
    assert services.purge(schedule, actor=root, now=clock.now()) == 3
    assert Occurrence.objects.count() == Step.objects.count() == Attempt.objects.count() == 2
    kept = set(Occurrence.objects.values_list("id", flat=True))
    assert set(Step.objects.values_list("occurrence_id", flat=True)) == kept
    assert set(Attempt.objects.values_list("occurrence_id", flat=True)) == kept
    assert AuditRecord.objects.get(action="purge").after == {
        "deleted": 3,
        "keep_for": None,
        "keep_last": 2,
    }


@pytest.mark.django_db(transaction=True)  # the refusal comes at commit (deferred foreign keys)
def test_a_purge_the_database_refuses_deletes_nothing_and_is_audited(root, clock) -> None:
    clock.set(T0)
    schedule = ScheduleFactory.create(job="tests.stepped", next_due_at=T0)
    Limit.objects.create(schedule=schedule, keep_last=1)
    run_minutes(schedule, clock, 3, jobs_with_steps())
    oldest = Occurrence.objects.order_by("scheduled_at").first()
    assert oldest is not None
    with connection.cursor() as cursor:  # a project table that still needs an occurrence
        cursor.execute(
            "CREATE TABLE app_invoice (occurrence_id uuid REFERENCES django_jobs_occurrence "
            "DEFERRABLE INITIALLY DEFERRED)"
        )
        cursor.execute("INSERT INTO app_invoice VALUES (%s)", [oldest.pk])
    try:
        with pytest.raises(JobsError, match=r"purge of tests\.schedule-\d+ failed and deleted"):
            services.purge(schedule, actor=root, now=clock.now())
        assert Occurrence.objects.count() == Step.objects.count() == Attempt.objects.count() == 3
        failed = AuditRecord.objects.get(action="purge.failed")
        assert failed.actor == "root"
        assert failed.after["deleted"] == 0
        assert failed.after["error_type"] == "IntegrityError"
        assert "app_invoice" in failed.after["error"]
        assert not AuditRecord.objects.filter(action="purge").exists()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE app_invoice")


# --- automatic retention ------------------------------------------------------------------


def test_a_retention_pass_deletes_finished_rows_past_every_limit_and_nothing_unfinished(
    clock,
) -> None:
    clock.set(T0)
    kept_for = ScheduleFactory.create(job="tests.stepped", next_due_at=T0)
    Limit.objects.create(schedule=kept_for, keep_for=timedelta(minutes=2))
    counted = ScheduleFactory.create(job="tests.stepped", next_due_at=T0)
    Limit.objects.create(schedule=counted, keep_last=1)
    unlimited = ScheduleFactory.create(job="tests.stepped", next_due_at=T0)  # no Limit: kept
    run_minutes(kept_for, clock, 5, jobs_with_steps())
    # Unfinished rows of a limited schedule, older than its limit: never deleted.
    stale = ScheduleFactory.create(job="tests.stepped", next_due_at=T0)
    Limit.objects.create(schedule=stale, keep_last=1)
    plan(stale, T0 - timedelta(days=3), T0 - timedelta(days=2), T0 - timedelta(days=1), now=T0)
    lease, failing = claim("ghost", T0, limit=2, tenant=None)[:2]
    assert {lease.schedule_id, failing.schedule_id} == {stale.pk}
    store.fail(failing, now=T0, error=SafeError("E", "later"), retry_at=T0 + timedelta(days=30))
    Schedule.objects.filter(pk=stale.pk).update(enabled=False, disabled_reason="held")
    assert clock.now() == T0 + timedelta(minutes=5)
    done = retention_pass(clock)
    assert done is not None
    assert done.deleted == 3 + 4  # kept_for: 3 of 5 older than two minutes; counted: 4 of 5
    assert Occurrence.objects.filter(schedule=kept_for).count() == 2
    assert Occurrence.objects.filter(schedule=counted).count() == 1
    assert Occurrence.objects.filter(schedule=unlimited).count() == 5
    assert sorted(Occurrence.objects.filter(schedule=stale).values_list("state", flat=True)) == [
        OccurrenceState.FAILED,
        OccurrenceState.PROCESSING,
        OccurrenceState.SCHEDULED,
    ]
    live = set(Occurrence.objects.values_list("id", flat=True))
    assert set(Step.objects.values_list("occurrence_id", flat=True)) <= live
    state = RetentionState.objects.get()
    assert (state.deleted, state.caught_up, state.replica) == (7, True, "test")
    assert state.caught_up_at == state.finished_at


def test_a_page_purge_is_bounded_by_the_batch_and_keeps_each_schedules_newest(clock) -> None:
    """One statement over several schedules deletes at most the batch, oldest first within
    each schedule; repeated, it leaves each schedule what its own Limit keeps."""
    clock.set(T0)
    schedules = [ScheduleFactory.create(next_due_at=None) for _ in range(3)]
    for n, schedule in enumerate(schedules):
        Limit.objects.create(schedule=schedule, keep_last=2 + n)
        plan(schedule, *(T0 - timedelta(minutes=m) for m in range(1, 7)), now=T0)
    Occurrence.objects.update(state=OccurrenceState.COMPLETED, finished_at=T0)
    ids = [s.pk for s in schedules]

    counts = []
    while count := store.purge_page(ids, now=T0, batch_size=4):
        counts.append(count)
    assert counts == [4, 4, 1]  # 4 + 3 + 2 beyond keep_last 2, 3, 4 of six each
    for n, schedule in enumerate(schedules):
        kept = Occurrence.objects.filter(schedule=schedule).order_by("-scheduled_at")
        newest = [T0 - timedelta(minutes=m) for m in range(1, 3 + n)]
        assert list(kept.values_list("scheduled_at", flat=True)) == newest


def test_a_retention_pass_over_thousands_of_limits_purges_a_page_per_statement(clock) -> None:
    """1,200 schedules with Limits and nothing to purge: three purge statements (pages of
    500), where one per schedule cost 1,200 every pass."""
    from django.test.utils import CaptureQueriesContext

    clock.set(T0)
    made = Schedule.objects.bulk_create(
        [ScheduleFactory.build(key=f"limited-{n}", next_due_at=None) for n in range(1200)]
    )
    Limit.objects.bulk_create([Limit(schedule=s, keep_last=5) for s in made])
    with CaptureQueriesContext(connection) as queries:
        done = retention_pass(clock)
    assert done is not None
    assert done.schedules == 1200
    purges = [q for q in queries.captured_queries if "gone_attempts AS" in q["sql"]]
    assert len(purges) == 3


def test_one_replica_at_a_time_runs_retention(clock) -> None:
    """A second connection holding the retention lock (a replica mid-pass): this one skips."""
    clock.set(T0)
    schedule = ScheduleFactory.create(job="tests.stepped", next_due_at=T0)
    Limit.objects.create(schedule=schedule, keep_last=1)
    run_minutes(schedule, clock, 3, jobs_with_steps())
    with psycopg.connect(database_url(), autocommit=True) as other:
        assert other.execute(
            "SELECT pg_try_advisory_lock(hashtext('django_jobs.retention'))"
        ).fetchone() == (True,)
        assert retention.run_pass(replica="test", clock=clock, settings=get_settings()) is None
        assert Occurrence.objects.count() == 3
        other.execute("SELECT pg_advisory_unlock(hashtext('django_jobs.retention'))")
    done = retention_pass(clock)  # the other replica's pass is over
    assert done is not None
    assert done.deleted == 2


def test_a_pass_out_of_budget_says_it_is_behind_and_the_next_continues(clock, settings) -> None:
    clock.set(T0)
    schedule = ScheduleFactory.create(job="tests.stepped", next_due_at=T0)
    Limit.objects.create(schedule=schedule, keep_last=1)
    run_minutes(schedule, clock, 4, jobs_with_steps())
    settings.DJANGO_JOBS = {"PURGE_BATCH_SIZE": 1, "RETENTION_BUDGET_SECONDS": 1e-9}
    first = retention_pass(clock)
    assert first is not None
    assert (first.deleted, first.caught_up) == (1, False)
    state = RetentionState.objects.get()
    assert not state.caught_up
    assert state.caught_up_at is None
    report = services.replica_health(
        host="nowhere", now=clock.now() + timedelta(seconds=30), max_age=timedelta(seconds=5)
    )
    assert report.as_dict()["retention"]["lag_seconds"] == 30.0
    settings.DJANGO_JOBS = {"PURGE_BATCH_SIZE": 1}
    second = retention_pass(clock)
    assert second is not None
    assert (second.deleted, second.caught_up) == (2, True)
    assert Occurrence.objects.count() == 1


def test_jobs_health_json_reports_the_last_retention_pass(clock) -> None:
    clock.set(T0)
    schedule = ScheduleFactory.create(job="tests.stepped", next_due_at=T0)
    Limit.objects.create(schedule=schedule, keep_last=1)
    run_minutes(schedule, clock, 3, jobs_with_steps())
    retention_pass(clock)
    out = StringIO()
    with pytest.raises(Exception, match="no runworker replica"):
        call_command("jobs", "health", "--json", "--host", "nowhere", stdout=out)
    report = json.loads(out.getvalue())["retention"]
    assert (report["replica"], report["deleted"], report["caught_up"]) == ("test", 2, True)
    assert report["lag_seconds"] == 0.0
    assert report["rows_per_second"] > 0


# --- one-offs retire, then go ----------------------------------------------------------


def test_a_run_time_one_off_retires_when_final_and_goes_after_its_retention(
    root, clock, registered
) -> None:
    registered("tests.stepped", lambda run: None, runtime=True)  # upsert_schedule: an offered job
    clock.set(T0)
    services.upsert_schedule(
        declaration(
            "acme.welcome",
            tenant="acme",
            job="tests.stepped",
            timing=after(timedelta(0)),
            retention=timedelta(days=1),
        ),
        actor=root,
        reason="a new tenant signed up",
        now=T0,
    )
    schedule = Schedule.objects.get(key="acme.welcome")
    assert Runbook.objects.filter(schedule=schedule).count() == 3
    assign_perm("django_jobs.replay_schedule", User.objects.create_user("alice"), schedule)
    done = retention_pass(clock)
    assert done is not None
    assert done.retired == 0
    run_due(clock, jobs=jobs_with_steps())
    clock.advance(timedelta(minutes=1))
    done = retention_pass(clock)
    assert done is not None
    assert (done.retired, done.removed) == (1, 0)
    schedule.refresh_from_db()
    assert (schedule.status, schedule.retired_at) == (ScheduleStatus.RETIRED, clock.now())
    assert AuditRecord.objects.filter(action="schedule.retired", target_id=str(schedule.pk))
    assert not ConsumedOneOff.objects.exists()  # run-time: nothing for sync to remember
    clock.advance(timedelta(days=1))  # exactly its retention: kept
    assert retention_pass(clock).removed == 0
    clock.advance(timedelta(seconds=1))
    assert retention_pass(clock).removed == 1
    assert not Schedule.objects.filter(key="acme.welcome").exists()
    assert (Occurrence.objects.count(), Attempt.objects.count(), Step.objects.count()) == (0, 0, 0)
    assert not Limit.objects.exists()
    assert not Runbook.objects.exists()
    assert not UserObjectPermission.objects.exists()  # alice's grant went with it
    removed = AuditRecord.objects.get(action="schedule.removed")
    assert (removed.tenant, removed.target_id) == ("acme", str(schedule.pk))


def test_a_one_off_limited_by_count_is_kept_one_off_keep_seconds(
    root, clock, settings, registered
) -> None:
    registered("tests.stepped", lambda run: None, runtime=True)
    settings.DJANGO_JOBS = {"ONE_OFF_KEEP_SECONDS": 3600}
    clock.set(T0)
    services.upsert_schedule(
        declaration("once", job="tests.stepped", timing=at(T0), retention=5),
        actor=root,
        reason="test",
        now=T0,
    )
    run_due(clock, jobs=jobs_with_steps())
    assert retention_pass(clock).retired == 1
    clock.advance(timedelta(minutes=59))
    assert retention_pass(clock).removed == 0
    clock.advance(timedelta(minutes=2))
    assert retention_pass(clock).removed == 1


def test_sync_does_not_bring_back_a_consumed_declared_one_off(clock) -> None:
    clock.set(T0)
    declared = [
        declaration("billing.first", job="tests.stepped", timing=after(timedelta(0))),
        declaration("billing.launch", job="tests.stepped", timing=at(T0)),
    ]
    assert len(services.sync_schedules(declared, now=T0).created) == 2
    run_due(clock, jobs=jobs_with_steps())
    clock.advance(timedelta(minutes=1))
    assert retention_pass(clock).retired == 2
    assert ConsumedOneOff.objects.count() == 2
    report = services.sync_schedules(declared, now=clock.now())
    assert sorted(report.consumed) == ["billing.first", "billing.launch"]
    assert report.created == report.updated == report.retired == []
    assert set(Schedule.objects.values_list("status", flat=True)) == {ScheduleStatus.RETIRED}
    # Removed by retention: sync still does not create them again.
    clock.advance(timedelta(days=91))
    assert retention_pass(clock).removed == 2
    report = services.sync_schedules(declared, now=clock.now())
    assert sorted(report.consumed) == ["billing.first", "billing.launch"]
    assert not Schedule.objects.exists()
    assert not Occurrence.objects.exists()
    # Another instant is another one-off.
    moved = declaration("billing.launch", job="tests.stepped", timing=at(T0 + timedelta(days=100)))
    report = services.sync_schedules([declared[0], moved], now=clock.now())
    assert report.created == ["billing.launch"]


def test_the_example_one_off_is_not_created_again_by_the_next_deploy(clock) -> None:
    from django_jobs.declarations import declared

    clock.set(T0)
    services.sync_schedules(declared.all(), now=T0)
    Schedule.objects.exclude(key="billing.first-statement").update(
        enabled=False, disabled_reason="x"
    )
    run_due(clock)
    retention_pass(clock)
    report = services.sync_schedules(declared.all(), now=clock.now())
    assert report.consumed == ["billing.first-statement"]
    assert Occurrence.objects.count() == 1


def test_recurring_schedules_never_retire_by_retention(clock) -> None:
    clock.set(T0)
    schedule = ScheduleFactory.create(
        job="tests.stepped", interval=timedelta(hours=1), next_due_at=T0
    )
    run_due(clock, jobs=jobs_with_steps())
    assert retention_pass(clock).retired == 0
    schedule.refresh_from_db()
    assert schedule.status == ScheduleStatus.ACTIVE


def test_a_pass_on_an_empty_database_does_nothing_and_says_so(clock) -> None:
    done = retention_pass(clock)
    assert done is not None
    assert (done.deleted, done.retired, done.removed, done.caught_up) == (0, 0, 0, True)
    assert RetentionState.objects.get().deleted == 0
