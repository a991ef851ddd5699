"""A serving replica (a real ``runworker`` process) meets long gaps and hostile rows: it keeps
heartbeating and running other work, parks what it refuses, and its memory stays flat."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from django_jobs import services, store
from django_jobs.identity import occurrence_id
from django_jobs.models import AuditRecord, Occurrence, OccurrenceState, Replica, Schedule

from .concurrency import wait_until, wait_while_progressing
from .factories import ScheduleFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

PER_MINUTE = {"timing_kind": "cron", "interval": None, "anchor": None, "cron": "* * * * *"}
MiB = 1024 * 1024


def every_second(key: str, now: datetime) -> Schedule:
    return ScheduleFactory.create(
        key=key,
        job="proc.effect",
        interval=timedelta(seconds=1),
        anchor=now,
        created_at=now,
        next_due_at=now,
        max_delay=timedelta(seconds=30),
    )


def completed(schedule: Schedule, since: datetime, until: datetime | None = None) -> int:
    done = Occurrence.objects.filter(
        schedule=schedule, state=OccurrenceState.COMPLETED, finished_at__gte=since
    )
    return done.filter(finished_at__lte=until).count() if until else done.count()


def peak_rss(pid: int) -> int:
    """The process's peak resident memory so far (bytes), as the kernel counts it."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for process {pid}")


def test_a_replica_catching_up_a_year_of_per_minute_gaps_keeps_heartbeating_and_serving(
    start,
) -> None:
    """Forty per-minute crons disabled for a year and enabled together: each year is planned
    in bounded passes (a month of it each), while the same replica heartbeats and keeps
    running an every-second schedule. Before planning was bounded, the first pass took about
    15 s per schedule in one transaction, with no heartbeat and no claim meanwhile."""
    now = store.database_clock().replace(microsecond=0)
    root = User.objects.create_superuser("root", "root@example.com", "x")
    tick = every_second("tick", now)
    year = [
        ScheduleFactory.create(
            key=f"year-{n}",
            job="proc.effect",
            **PER_MINUTE,
            misfire="skip",
            max_delay=timedelta(minutes=5),
            created_at=now - timedelta(days=400),
            last_scheduled_at=now - timedelta(days=365),
            enabled=False,
            disabled_reason="a year off",
            next_due_at=None,
        )
        for n in range(40)
    ]
    replica = start("r1")
    wait_until(lambda: completed(tick, now) >= 3, timeout=60, what="the replica to serve tick")

    enabled_at = store.database_clock()
    for schedule in year:
        services.enable(schedule, actor=root, reason="back after a year", now=enabled_at)
    heartbeats: set[datetime] = set()

    def caught_up() -> bool:
        heartbeats.update(Replica.objects.filter(pk="r1").values_list("heartbeat_at", flat=True))
        behind = Schedule.objects.filter(
            key__startswith="year-", last_scheduled_at__lt=enabled_at - timedelta(minutes=10)
        )
        return not behind.exists()

    def reached() -> list[datetime | None]:
        year_rows = Schedule.objects.filter(key__startswith="year-").order_by("key")
        return list(year_rows.values_list("last_scheduled_at", flat=True))

    # Each pass decides for 0.5 s: a loaded machine takes more passes, never none.
    wait_while_progressing(caught_up, reached, what="the year-long gaps to be planned")
    caught_up_at = store.database_clock()

    passes = [e for e in replica.events() if e["event"] == "plan.pass" and e["more"]]
    assert len(passes) >= 12  # a month of each year per pass
    # Each pass stops deciding after 0.5 s: its own CPU time, however loaded the machine.
    assert max(e["cpu_seconds"] for e in passes) < 1.5
    beats = sorted(b for b in heartbeats if b >= enabled_at)
    assert beats
    assert max(b - a for a, b in itertools.pairwise([enabled_at, *beats, caught_up_at])) < (
        timedelta(seconds=3)  # HEARTBEAT_SECONDS is 1 in tests/worker_settings.py
    )
    assert completed(tick, enabled_at, caught_up_at) >= 1
    # Every minute of each year is accounted for: summarised, skipped with a row, or planned.
    for schedule in year:
        schedule.refresh_from_db()
        summaries = AuditRecord.objects.filter(action="misfire.skipped", schedule_id=schedule.pk)
        rows = Occurrence.objects.filter(schedule=schedule).count()
        assert schedule.last_scheduled_at is not None
        first = (now - timedelta(days=365)).replace(second=0) + timedelta(minutes=1)
        minutes = (schedule.last_scheduled_at - first) // timedelta(minutes=1) + 1
        assert sum(r.after["count"] for r in summaries) + rows == minutes
        assert schedule.parked_field == ""
    assert replica.alive


def test_hostile_rows_written_mid_run_are_parked_and_the_replicas_memory_stays_flat(
    start,
) -> None:
    """The review's rows, written behind the service layer's back while a replica serves:
    every second, replay all, a cap of 2^31-1, created (says the row) in 1970, which built
    billions of instants until the replica was killed, and then the next replica; a
    per-minute cron claiming 1970 with a valid cap; an occurrence forged into another
    tenant. The replica parks the first, plans the second a month per pass, refuses the
    third, keeps serving, and its peak memory barely moves."""
    now = store.database_clock().replace(microsecond=0)
    tick = every_second("tick", now)
    replica = start("r1")
    wait_until(lambda: completed(tick, now) >= 3, timeout=60, what="the replica to serve tick")
    baseline = peak_rss(replica.process.pid)

    written_at = store.database_clock()
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    hostile = ScheduleFactory.create(
        key="hostile",
        job="proc.effect",
        interval=timedelta(seconds=1),
        anchor=epoch,
        misfire="replay_all",
        max_catchup=2**31 - 1,
        max_delay=timedelta(seconds=1),
        created_at=epoch,
        next_due_at=written_at,
    )
    ancient = ScheduleFactory.create(
        key="ancient",
        job="proc.effect",
        **PER_MINUTE,
        misfire="replay_once",
        max_delay=timedelta(minutes=5),
        created_at=epoch,
        next_due_at=written_at,
    )
    forged_at = written_at.replace(microsecond=0) + timedelta(seconds=1)
    forged = Occurrence.objects.create(
        id=occurrence_id("globex", tick.key, forged_at),
        schedule=tick,
        tenant="globex",
        scheduled_at=forged_at,
        due_at=forged_at,
    )

    def settled() -> bool:
        hostile.refresh_from_db()
        ancient.refresh_from_db()
        forged.refresh_from_db()
        return (
            hostile.parked_field == "max_catchup"
            and forged.state == OccurrenceState.DEAD
            and ancient.last_scheduled_at is not None
            and ancient.last_scheduled_at >= epoch + timedelta(days=93)
            and completed(tick, written_at) >= 3
        )

    wait_until(settled, timeout=60, what="the hostile rows to be parked, refused and planned")

    assert "from 0 to 10000" in hostile.parked_reason
    assert not Occurrence.objects.filter(schedule=hostile).exists()
    assert forged.last_error_type == store.TENANT_MISMATCH
    assert not forged.attempt_history.exists()
    assert replica.logged("occurrence.refused") == 1
    assert replica.alive
    assert peak_rss(replica.process.pid) - baseline < 40 * MiB
