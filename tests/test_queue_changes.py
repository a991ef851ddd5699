"""A change of queue reaches the database (issue #36): every writer of a schedule record
writes its ``queue`` (``jobs sync`` for a declared schedule, the sync's alignment of a job's
policy record to ``@job(queue=)``, ``upsert_schedule``), audits it with before and after like
any other field, and moves the occurrences the record planned that wait to start (scheduled,
or failed and waiting for their retry) to the new queue in the same transaction. A running
occurrence, a finished one and enqueued work (whose queue its ``enqueue()`` chose) keep
theirs.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_jobs import enqueue, services, store
from django_jobs.clock import use_clock
from django_jobs.models import AuditRecord, Occurrence, Schedule
from django_jobs.registry import JobPolicies, registry
from django_jobs.safe_error import SafeError
from django_jobs.services.enqueue import policy_key
from django_jobs.services.sync import fingerprint, sync_if_changed
from django_jobs.testing import FakeClock

from .factories import T0, declaration
from .storeutil import claim, plan

pytestmark = pytest.mark.django_db

LATER = T0 + timedelta(hours=1)


def probe(queue: str, **fields):
    return declaration("probe.queue", queue=queue, overlap="allow", **fields)


def occurrences_in_every_state(record: Schedule) -> dict[str, Occurrence]:
    """Occurrences of ``record`` on its queue: one planned ahead (scheduled, not yet due),
    one failed and waiting for its retry, one running, one completed."""
    ahead = T0 + timedelta(days=2)
    plan(record, T0, T0 + timedelta(seconds=1), T0 + timedelta(seconds=2), ahead, now=T0)
    now = T0 + timedelta(seconds=3)
    failed, running, completed = sorted(claim("r1", now, limit=3), key=lambda x: x.scheduled_at)
    boom = SafeError("RuntimeError", "boom")
    assert store.fail(failed, now=now, error=boom, retry_at=now + timedelta(days=1))
    assert store.complete([completed], now=now).accepted
    ids = {
        "scheduled": Occurrence.objects.get(schedule=record, scheduled_at=ahead).pk,
        "failed": failed.occurrence_id,
        "processing": running.occurrence_id,
        "completed": completed.occurrence_id,
    }
    return {state: Occurrence.objects.get(pk=pk) for state, pk in ids.items()}


def queues(occurrences: dict[str, Occurrence]) -> dict[str, str]:
    """Each occurrence's state (as the database holds it now) and queue, by what it was."""
    now = {o.pk: o for o in Occurrence.objects.filter(pk__in=[o.pk for o in occurrences.values()])}
    return {name: f"{now[o.pk].state}:{now[o.pk].queue}" for name, o in occurrences.items()}


def test_a_declared_schedules_queue_change_is_written_audited_and_moves_its_waiting_work() -> None:
    services.sync_schedules([probe("mail")], now=T0)
    record = Schedule.objects.get(key="probe.queue")
    made = occurrences_in_every_state(record)

    report = services.sync_schedules([probe("reports")], now=LATER)

    assert str(report).startswith("0 created, 1 updated")
    assert Schedule.objects.get(pk=record.pk).queue == "reports"
    changed = AuditRecord.objects.get(target_id=str(record.pk), action="schedule.changed")
    assert (changed.before, changed.after) == ({"queue": "mail"}, {"queue": "reports"})
    assert queues(made) == {
        "scheduled": "scheduled:reports",
        "failed": "failed:reports",
        "processing": "processing:mail",  # claimed by a replica serving mail: it ends there
        "completed": "completed:mail",
    }
    # Planned from then on: on the new queue, and the next sync finds nothing to change.
    (new,) = plan(record, T0 + timedelta(days=3), now=LATER)
    assert Occurrence.objects.get(pk=new).queue == "reports"
    assert services.sync_schedules([probe("reports")], now=LATER).unchanged == ["probe.queue"]


def test_a_change_of_queue_alone_changes_the_fingerprint_so_start_up_syncs_run() -> None:
    assert fingerprint([probe("mail")]) != fingerprint([probe("reports")])
    sync_if_changed([probe("mail")], now=T0, by="replica a")
    report = sync_if_changed([probe("reports")], now=LATER, by="replica b")
    assert (report.skipped, report.updated) == (False, ["probe.queue"])
    assert Schedule.objects.get(key="probe.queue").queue == "reports"


def test_a_jobs_queue_change_reaches_its_policy_record_and_later_enqueues(registered) -> None:
    registered("q.send", lambda run: None, policies=JobPolicies(queue="mail", owner="t"))
    clock = FakeClock(T0)
    with use_clock(clock):
        by_job = enqueue("q.send", tenant="acme")
        given = enqueue("q.send", tenant="acme", queue="mail-urgent")
    handler = registry.get("q.send")
    registry.unregister("q.send")
    registry.register("q.send", handler.func, policies=JobPolicies(queue="reports", owner="t"))

    report = services.sync_schedules([], now=LATER)

    record = Schedule.objects.get(tenant="acme", key=policy_key("q.send"))
    assert (record.queue, report.updated) == ("reports", ["acme/@q.send"])
    audit = AuditRecord.objects.get(action="schedule.policies_changed")
    assert (audit.before, audit.after) == ({"queue": "mail"}, {"queue": "reports"})
    with use_clock(clock):
        later = enqueue("q.send", tenant="acme")
    assert Occurrence.objects.get(pk=later.id).queue == "reports"
    # Enqueued work keeps the queue its enqueue() chose (the job's then, or the one given).
    assert Occurrence.objects.get(pk=by_job.id).queue == "mail"
    assert Occurrence.objects.get(pk=given.id).queue == "mail-urgent"
    assert services.sync_schedules([], now=LATER).updated == []


def test_upsert_schedule_writes_a_queue_change_audited_and_moves_its_waiting_work(root) -> None:
    def acme(queue: str):
        return declaration("billing.statements", tenant="acme", queue=queue, overlap="allow")

    row = services.upsert_schedule(acme("mail"), actor=root, reason="signed up", now=T0)
    made = occurrences_in_every_state(row)

    services.upsert_schedule(acme("reports"), actor=root, reason="own replicas", now=LATER)

    assert Schedule.objects.get(pk=row.pk).queue == "reports"
    changed = AuditRecord.objects.get(target_id=str(row.pk), action="schedule.changed")
    assert (changed.before, changed.after) == ({"queue": "mail"}, {"queue": "reports"})
    assert (changed.reason, changed.actor_id) == ("own replicas", str(root.pk))
    assert queues(made) == {
        "scheduled": "scheduled:reports",
        "failed": "failed:reports",
        "processing": "processing:mail",
        "completed": "completed:mail",
    }
