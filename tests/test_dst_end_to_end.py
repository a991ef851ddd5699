"""End to end across DST: a real worker, on a clock the test sets, through New York's 2027
transitions.

The replica is ``manage.py runworker_fileclock`` (``runworker`` whose clock is a file this test
writes: tests/workerapp/management/commands/runworker_fileclock.py). The test steps that clock
every 30 minutes through each window and, after each step, waits (bounded) until the replica
has planned up to the new instant and finished what came due; nothing waits for time to pass.
The clock never moves while a run is in flight, so leases (2 s here) cannot expire under a run.

- Spring, 2027-03-14: New York jumps from 02:00 EST to 03:00 EDT, so 02:30 does not exist.
  ``cron("30 2 * * *", skipped="skip")`` runs on 03-13 and 03-15 at 02:30 local, not on 03-14.
- Autumn, 2027-11-07: New York falls back from 02:00 EDT to 01:00 EST, so 01:30 happens twice.
  ``cron("30 1 * * *", repeated="both")`` runs twice on 11-07 (05:30Z and 06:30Z), once a day
  around it.

The expected instants are written out in UTC here (not computed), so a broken evaluation fails
this test as well as tests/scheduling/.
"""

from __future__ import annotations

import functools
import signal
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from django_jobs.models import Attempt, AttemptOutcome, Occurrence, OccurrenceState, Schedule
from django_jobs.scheduling.timings import cron
from tests.workerapp.models import Effect

from .concurrency import wait_until
from .processes import FileClock, Replica, clocked_replica, clocked_schedule, log_tail

pytestmark = pytest.mark.django_db(transaction=True)

NEW_YORK = "America/New_York"
STEP = timedelta(minutes=30)  # lands on every :00 and :30 UTC, so on every expected instant

# 2027-03-12 12:00 EST to 2027-03-15 19:00 EST (EDT from 2027-03-14 02:00 EST = 07:00Z).
SPRING_START = datetime(2027, 3, 12, 17, 0, tzinfo=UTC)
SPRING_END = datetime(2027, 3, 16, 0, 0, tzinfo=UTC)
SPRING_RUNS = [
    datetime(2027, 3, 13, 7, 30, tzinfo=UTC),  # 02:30 EST
    # 2027-03-14: no 02:30 in New York, and skipped="skip": no run (shift would be 07:00Z)
    datetime(2027, 3, 15, 6, 30, tzinfo=UTC),  # 02:30 EDT
]
SPRING_AFTER = datetime(2027, 3, 16, 6, 30, tzinfo=UTC)  # the next one, past the window

# 2027-11-05 12:00 EDT to 2027-11-08 19:00 EST (EST from 2027-11-07 02:00 EDT = 06:00Z).
AUTUMN_START = datetime(2027, 11, 5, 16, 0, tzinfo=UTC)
AUTUMN_END = datetime(2027, 11, 9, 0, 0, tzinfo=UTC)
AUTUMN_RUNS = [
    datetime(2027, 11, 6, 5, 30, tzinfo=UTC),  # 01:30 EDT
    datetime(2027, 11, 7, 5, 30, tzinfo=UTC),  # 01:30 EDT, the first 01:30 of the night
    datetime(2027, 11, 7, 6, 30, tzinfo=UTC),  # 01:30 EST, the second: repeated="both"
    datetime(2027, 11, 8, 6, 30, tzinfo=UTC),  # 01:30 EST
]
AUTUMN_AFTER = datetime(2027, 11, 9, 6, 30, tzinfo=UTC)

SPRING_TIMING = cron("30 2 * * *", zone=NEW_YORK, skipped="skip", repeated="first")
AUTUMN_TIMING = cron("30 1 * * *", zone=NEW_YORK, skipped="shift", repeated="both")

UNFINISHED = (OccurrenceState.SCHEDULED, OccurrenceState.PROCESSING, OccurrenceState.FAILED)


def completed(schedule: Schedule) -> list[tuple[datetime, str]]:
    return list(
        Occurrence.objects.filter(schedule=schedule)
        .order_by("scheduled_at")
        .values_list("scheduled_at", "state")
    )


def settled(replica: Replica, schedule: Schedule, now: datetime) -> bool:
    """The replica has planned ``schedule`` past ``now`` and finished everything it planned."""
    if not replica.alive:
        raise AssertionError(f"exited with {replica.process.returncode}: {log_tail(replica)}")
    next_due = Schedule.objects.values_list("next_due_at", flat=True).get(pk=schedule.pk)
    if next_due is None or next_due <= now:
        return False
    return not Occurrence.objects.filter(schedule=schedule, state__in=UNFINISHED).exists()


def step_through(
    replica: Replica,
    clock: FileClock,
    schedule: Schedule,
    *,
    start: datetime,
    end: datetime,
    runs: list[datetime],
    after: datetime,
) -> None:
    """Move the replica's clock from ``start`` to ``end`` in ``STEP``s; after each, wait until
    the replica has done what came due, and check it did exactly that."""
    now = start
    while now <= end:
        clock.set(now)
        try:
            wait_until(
                functools.partial(settled, replica, schedule, now),
                timeout=60,
                what=f"{schedule.key} to be planned past {now} and finished",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the replica's log:\n{log_tail(replica)}") from None
        due = [instant for instant in runs if instant <= now]
        assert completed(schedule) == [(i, OccurrenceState.COMPLETED) for i in due], (
            f"{schedule.key}: what ran by {now}"
        )
        next_due = Schedule.objects.values_list("next_due_at", flat=True).get(pk=schedule.pk)
        expected_next = next(i for i in [*runs, after] if i > now)
        assert next_due == expected_next, f"{schedule.key}: next due after {now}"
        now += STEP


def assert_ran_exactly_once_each(schedule: Schedule, runs: list[datetime], replica: str) -> None:
    occurrences = list(Occurrence.objects.filter(schedule=schedule).order_by("scheduled_at"))
    assert [o.scheduled_at for o in occurrences] == runs
    for occurrence in occurrences:
        assert occurrence.state == OccurrenceState.COMPLETED
        assert occurrence.trigger == "schedule"
        # The clock stood still at each instant until its run had finished: started and
        # finished at exactly the scheduled instant, on the replica's (fake) time.
        assert occurrence.started_at == occurrence.scheduled_at
        assert occurrence.finished_at == occurrence.scheduled_at
    keys = [str(o.pk) for o in occurrences]
    assert len(set(keys)) == len(runs), "two instants shared an identity"
    attempts = list(
        Attempt.objects.filter(occurrence__schedule=schedule)
        .order_by("occurrence__scheduled_at")
        .values_list("occurrence_id", "number", "replica", "outcome", "started_at")
    )
    assert attempts == [
        (o.pk, 1, replica, AttemptOutcome.SUCCEEDED, o.scheduled_at) for o in occurrences
    ]
    effects = Counter(
        Effect.objects.filter(occurrence_key__in=keys).values_list("occurrence_key", "token")
    )
    tokens = dict(
        Attempt.objects.filter(occurrence__schedule=schedule).values_list(
            "occurrence_id", "fencing_token"
        )
    )
    expected = Counter({(str(o.pk), tokens[o.pk]): 1 for o in occurrences})
    assert effects == expected, "an effect is missing or doubled"


def test_the_project_evaluates_the_instants_this_test_expects() -> None:
    """The pure evaluation agrees with the literal instants (a failure here points at
    django_jobs/scheduling/, not at the worker)."""
    assert SPRING_TIMING.between(SPRING_START, SPRING_AFTER + STEP) == [*SPRING_RUNS, SPRING_AFTER]
    assert AUTUMN_TIMING.between(AUTUMN_START, AUTUMN_AFTER + STEP) == [*AUTUMN_RUNS, AUTUMN_AFTER]


@pytest.mark.processes
def test_a_real_worker_runs_each_dst_instant_exactly_as_the_rules_say(tmp_path: Path) -> None:
    spring = clocked_schedule("dst.spring-skip", SPRING_TIMING, SPRING_START)
    autumn = clocked_schedule("dst.autumn-both", AUTUMN_TIMING, AUTUMN_START)
    clock = FileClock(tmp_path / "clock", SPRING_START)
    replica = clocked_replica("dst", tmp_path, clock)
    try:
        step_through(
            replica,
            clock,
            spring,
            start=SPRING_START,
            end=SPRING_END,
            runs=SPRING_RUNS,
            after=SPRING_AFTER,
        )
        assert not Occurrence.objects.filter(schedule=autumn).exists()
        # The spring window is over: without this, the jump to November would plan (and run,
        # max_delay permitting) every day in between.
        Schedule.objects.filter(pk=spring.pk).update(
            enabled=False,
            disabled_by="tests",
            disabled_reason="the spring window of the DST test is over",
            disabled_at=SPRING_END,
        )
        step_through(
            replica,
            clock,
            autumn,
            start=AUTUMN_START,
            end=AUTUMN_END,
            runs=AUTUMN_RUNS,
            after=AUTUMN_AFTER,
        )
        replica.signal(signal.SIGTERM)
        assert replica.wait_exit(timeout=30) == 0, log_tail(replica)
    finally:
        replica.stop()

    assert_ran_exactly_once_each(spring, SPRING_RUNS, "dst")
    assert_ran_exactly_once_each(autumn, AUTUMN_RUNS, "dst")
    assert Effect.objects.count() == len(SPRING_RUNS) + len(AUTUMN_RUNS)
