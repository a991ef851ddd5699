"""End to end for calendar rules: real workers, on a clock the test sets, through Berlin's 2027
DST nights, German and US public holidays.

The replicas are ``manage.py runworker_fileclock`` processes (``runworker`` whose clock is a
file this test writes: tests/workerapp/management/commands/runworker_fileclock.py). The test
moves that clock to each instant that matters and a minute before it, wakes the replicas with
a NOTIFY (as another replica's plan would), and waits (bounded) until every replica has looked
at the new instant and finished what came due; nothing waits for time to pass. The clock never
moves while a run is in flight, so leases (2 s here) cannot expire under a run.

- Berlin, ``FREQ=DAILY;BYHOUR=2;BYMINUTE=30`` excluding German public holidays (Easter 2027 is
  03-28, the night Berlin springs forward): no run on Good Friday (03-26) or Easter Monday
  (03-29), each recorded as skipped with reason ``excluded``; 02:30 does not exist on 03-28,
  so ``skipped="shift"`` runs it at 03:00 CEST; in autumn (10-31) 02:30 happens twice and
  ``repeated="both"`` runs both.
- Berlin, Fridays 02:30 excluding holidays and weekends, ``on_excluded="next"``: Good Friday's
  run moves past the weekend and Easter Monday to Tuesday 03-30 02:30, which is summer time.
- New York, payroll on the 15th at 10:00 excluding US holidays and weekends,
  ``on_excluded="previous"``: 2027-02-15 is Washington's Birthday (a Monday), so it runs once,
  on Friday 02-12, with two replicas racing for it; a second replica that plans the month
  again derives the same identity and runs nothing twice.

The expected instants are written out in UTC here (not computed), so a broken evaluation fails
this test as well as tests/scheduling/; so are the identities' instants: the instant an
occurrence actually runs, never the date the rule named.
"""

from __future__ import annotations

import functools
import signal
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from django_jobs import WEEKENDS, Holidays, rrule, store
from django_jobs.identity import occurrence_id
from django_jobs.models import (
    Attempt,
    AttemptOutcome,
    Occurrence,
    OccurrenceState,
    Schedule,
    SkipReason,
)
from django_jobs.models import Replica as ReplicaRow
from tests.workerapp.models import Effect

from .concurrency import wait_until
from .processes import FileClock, Replica, clocked_replica, clocked_schedule, log_tail

pytestmark = pytest.mark.django_db(transaction=True)

BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"
TENANT = ""  # ScheduleFactory's schedules belong to no tenant
MINUTE = timedelta(minutes=1)

NIGHTLY = rrule(
    "FREQ=DAILY;BYHOUR=2;BYMINUTE=30",
    zone=BERLIN,
    skipped="shift",
    repeated="both",
    reason="the nightly export runs after midnight in Berlin",
    exclude=Holidays("DE"),
)

# 2027-03-24 13:00 CET to 2027-03-30 14:00 CEST (CEST from 2027-03-28 02:00 CET = 01:00Z).
SPRING_START = datetime(2027, 3, 24, 12, 0, tzinfo=UTC)
SPRING_END = datetime(2027, 3, 30, 12, 0, tzinfo=UTC)
SPRING_RUNS = [
    datetime(2027, 3, 25, 1, 30, tzinfo=UTC),  # Thu 02:30 CET
    datetime(2027, 3, 27, 1, 30, tzinfo=UTC),  # Sat 02:30 CET (weekends are not excluded)
    datetime(2027, 3, 28, 1, 0, tzinfo=UTC),  # Sun: no 02:30; shift: 03:00 CEST, the gap's end
    datetime(2027, 3, 30, 0, 30, tzinfo=UTC),  # Tue 02:30 CEST
]
SPRING_EXCLUDED = [
    datetime(2027, 3, 26, 1, 30, tzinfo=UTC),  # Good Friday 02:30 CET
    datetime(2027, 3, 29, 0, 30, tzinfo=UTC),  # Easter Monday 02:30 CEST
]
SPRING_AFTER = datetime(2027, 3, 31, 0, 30, tzinfo=UTC)  # the next one, past the window

# 2027-10-29 14:00 CEST to 2027-11-01 13:00 CET (CET from 2027-10-31 03:00 CEST = 01:00Z).
AUTUMN_START = datetime(2027, 10, 29, 12, 0, tzinfo=UTC)
AUTUMN_END = datetime(2027, 11, 1, 12, 0, tzinfo=UTC)
AUTUMN_RUNS = [
    datetime(2027, 10, 30, 0, 30, tzinfo=UTC),  # Sat 02:30 CEST
    datetime(2027, 10, 31, 0, 30, tzinfo=UTC),  # Sun 02:30 CEST, the first 02:30 of the night
    datetime(2027, 10, 31, 1, 30, tzinfo=UTC),  # Sun 02:30 CET, the second: repeated="both"
    datetime(2027, 11, 1, 1, 30, tzinfo=UTC),  # Mon 02:30 CET (All Saints' is not national)
]
AUTUMN_AFTER = datetime(2027, 11, 2, 1, 30, tzinfo=UTC)

FRIDAYS = rrule(
    "FREQ=WEEKLY;BYDAY=FR;BYHOUR=2;BYMINUTE=30",
    zone=BERLIN,
    skipped="shift",
    repeated="first",
    reason="the weekly close runs after midnight in Berlin",
    exclude=[Holidays("DE"), WEEKENDS],
    on_excluded="next",
)
GOOD_FRIDAY = datetime(2027, 3, 26, 1, 30, tzinfo=UTC)  # Fri 02:30 CET: excluded, moved
# Sat, Sun (DST night) and Easter Monday are excluded too: Tue 02:30, now CEST.
FRIDAY_RUNS = [datetime(2027, 3, 30, 0, 30, tzinfo=UTC)]
FRIDAY_AFTER = datetime(2027, 4, 2, 0, 30, tzinfo=UTC)  # Fri 02:30 CEST

PAYROLL = rrule(
    "FREQ=MONTHLY;BYMONTHDAY=15;BYHOUR=10",
    zone=NEW_YORK,
    skipped="shift",
    repeated="first",
    reason="salaries are paid at 10:00 New York time",
    exclude=[Holidays("US"), WEEKENDS],
    on_excluded="previous",
)
PAY_START = datetime(2027, 2, 11, 17, 0, tzinfo=UTC)  # Thu 12:00 EST
# Mon 2027-02-15 is Washington's Birthday; Sat 13 and Sun 14 are weekends: Fri 12, 10:00 EST.
PAY_RUN = datetime(2027, 2, 12, 15, 0, tzinfo=UTC)
PAY_DATE = datetime(2027, 2, 15, 15, 0, tzinfo=UTC)  # Mon 10:00 EST: the date the rule names
PAY_END = datetime(2027, 2, 16, 17, 0, tzinfo=UTC)  # Tue 12:00 EST
PAY_AFTER = datetime(2027, 3, 15, 14, 0, tzinfo=UTC)  # Mon 10:00 EDT (DST since 03-14)

UNFINISHED = (OccurrenceState.SCHEDULED, OccurrenceState.PROCESSING, OccurrenceState.FAILED)


def steps(start: datetime, end: datetime, instants: Sequence[datetime]) -> list[datetime]:
    """Where the clock stops: the window's ends, each instant that matters and a minute
    before it (so that nothing runs early)."""
    marks = {start, end}
    for instant in instants:
        marks.update({instant - MINUTE, instant})
    return sorted(mark for mark in marks if start <= mark <= end)


def next_due(schedule: Schedule) -> datetime | None:
    due: datetime | None = Schedule.objects.values_list("next_due_at", flat=True).get(
        pk=schedule.pk
    )
    return due


def settled(replicas: Sequence[Replica], schedules: Sequence[Schedule], now: datetime) -> bool:
    """Every replica has looked at its clock at ``now`` (its heartbeat says so) and every
    schedule is planned past ``now`` with nothing left unfinished."""
    for replica in replicas:
        if not replica.alive:
            raise AssertionError(f"exited with {replica.process.returncode}: {log_tail(replica)}")
    names = [replica.name for replica in replicas]
    looked = ReplicaRow.objects.filter(id__in=names, heartbeat_at__gte=now).count()
    if looked < len(replicas):
        return False
    for schedule in schedules:
        due = next_due(schedule)
        if due is None or due <= now:
            return False
    return not Occurrence.objects.filter(schedule__in=schedules, state__in=UNFINISHED).exists()


def planned_past(replica: Replica, schedule: Schedule, due: datetime) -> bool:
    """``replica`` (still running) has planned ``schedule`` up to ``due``."""
    if not replica.alive:
        raise AssertionError(f"exited with {replica.process.returncode}: {log_tail(replica)}")
    return next_due(schedule) == due


def ran(schedule: Schedule) -> list[tuple[datetime, str]]:
    """The occurrences of ``schedule`` that were not skipped, in order, with their state."""
    return list(
        Occurrence.objects.filter(schedule=schedule)
        .exclude(state=OccurrenceState.SKIPPED)
        .order_by("scheduled_at")
        .values_list("scheduled_at", "state")
    )


def skipped(schedule: Schedule) -> set[tuple[datetime, str]]:
    return set(
        Occurrence.objects.filter(schedule=schedule, state=OccurrenceState.SKIPPED).values_list(
            "scheduled_at", "skip_reason"
        )
    )


def walk(
    replicas: Sequence[Replica],
    clock: FileClock,
    schedule: Schedule,
    *,
    stops: list[datetime],
    runs: list[datetime],
    after: datetime,
    excluded: Sequence[datetime] = (),
) -> None:
    """Move the clock through ``stops``; after each, wait until the replicas have done what
    came due, and check they did exactly that. (An excluded instant is recorded when the
    schedule is next planned, so by a stop it may or may not be there yet; the final checks
    see it.)"""
    for now in stops:
        clock.set(now)
        try:
            wait_until(
                functools.partial(settled, replicas, [schedule], now),
                timeout=60,
                what=f"{schedule.key} to be planned past {now} and finished",
            )
        except AssertionError as exc:
            logs = "\n".join(log_tail(replica) for replica in replicas)
            raise AssertionError(f"{exc}; the replicas' logs:\n{logs}") from None
        due = [instant for instant in runs if instant <= now]
        assert ran(schedule) == [(i, OccurrenceState.COMPLETED) for i in due], (
            f"{schedule.key}: what ran by {now}"
        )
        assert skipped(schedule) <= {(i, SkipReason.EXCLUDED) for i in excluded if i <= now}, (
            f"{schedule.key}: what was skipped by {now}"
        )
        expected_next = next(i for i in [*runs, after] if i > now)
        assert next_due(schedule) == expected_next, f"{schedule.key}: next due after {now}"


def assert_record(
    schedule: Schedule, *, runs: list[datetime], excluded: Sequence[datetime] = ()
) -> None:
    """Each of ``runs`` ran exactly once, at its instant, under the identity of that instant;
    each of ``excluded`` is a skipped occurrence with reason ``excluded``; nothing else."""
    rows = list(
        Occurrence.objects.filter(schedule=schedule)
        .order_by("scheduled_at")
        .values_list("pk", "scheduled_at", "state", "skip_reason", "started_at", "finished_at")
    )
    expected = sorted(
        [(i, OccurrenceState.COMPLETED, "", i) for i in runs]
        + [(i, OccurrenceState.SKIPPED, SkipReason.EXCLUDED, None) for i in excluded],
        key=lambda row: row[0],
    )
    assert [(at, state, reason, started) for _, at, state, reason, started, _ in rows] == expected
    assert [pk for pk, *_ in rows] == [
        occurrence_id(TENANT, schedule.key, row[0]) for row in expected
    ], "an occurrence's identity is not (tenant, key, the instant it runs)"
    # The clock stood still at each instant until its run had finished.
    assert [row[5] for row in rows if row[2] == OccurrenceState.COMPLETED] == runs
    attempts = list(
        Attempt.objects.filter(occurrence__schedule=schedule)
        .order_by("occurrence__scheduled_at")
        .values_list("occurrence_id", "number", "outcome", "started_at", "fencing_token", "replica")
    )
    run_ids = [occurrence_id(TENANT, schedule.key, i) for i in runs]
    assert [a[:4] for a in attempts] == [
        (pk, 1, AttemptOutcome.SUCCEEDED, at) for pk, at in zip(run_ids, runs, strict=True)
    ]
    effects = sorted(
        Effect.objects.filter(occurrence_key__in=[str(pk) for pk in run_ids]).values_list(
            "occurrence_key", "token", "replica"
        )
    )
    assert effects == sorted((str(pk), token, replica) for pk, *_, token, replica in attempts), (
        "an effect is missing, doubled, or written by a replica that did not run it"
    )


def stop_cleanly(replica: Replica) -> None:
    replica.signal(signal.SIGTERM)
    assert replica.wait_exit(timeout=30) == 0, log_tail(replica)


def test_the_project_evaluates_the_instants_this_test_expects() -> None:
    """The pure evaluation agrees with the literal instants (a failure here points at
    django_jobs/scheduling/, not at the worker)."""
    assert NIGHTLY.between(SPRING_START, SPRING_AFTER + MINUTE) == [*SPRING_RUNS, SPRING_AFTER]
    assert NIGHTLY.excluded_between(SPRING_START, SPRING_END) == SPRING_EXCLUDED
    assert NIGHTLY.between(AUTUMN_START, AUTUMN_AFTER + MINUTE) == [*AUTUMN_RUNS, AUTUMN_AFTER]
    assert NIGHTLY.excluded_between(AUTUMN_START, AUTUMN_END) == []
    assert FRIDAYS.between(SPRING_START, FRIDAY_AFTER + MINUTE) == [*FRIDAY_RUNS, FRIDAY_AFTER]
    assert FRIDAYS.excluded_between(SPRING_START, SPRING_END) == []  # moved, not skipped
    assert PAYROLL.between(PAY_START, PAY_AFTER + MINUTE) == [PAY_RUN, PAY_AFTER]
    assert PAYROLL.excluded_between(PAY_START, PAY_AFTER) == []


@pytest.mark.processes
def test_a_real_worker_runs_a_berlin_rule_through_both_dst_nights_and_the_easter_holidays(
    tmp_path: Path,
) -> None:
    spring = clocked_schedule("rrule.nightly-spring", NIGHTLY, SPRING_START)
    autumn = clocked_schedule("rrule.nightly-autumn", NIGHTLY, AUTUMN_START)
    clock = FileClock(tmp_path / "clock", SPRING_START)
    replica = clocked_replica("nightly", tmp_path, clock)
    try:
        walk(
            [replica],
            clock,
            spring,
            stops=steps(SPRING_START, SPRING_END, [*SPRING_RUNS, *SPRING_EXCLUDED]),
            runs=SPRING_RUNS,
            excluded=SPRING_EXCLUDED,
            after=SPRING_AFTER,
        )
        assert not Occurrence.objects.filter(schedule=autumn).exists()
        # The spring window is over: without this, the jump to October would plan (and skip
        # as missed) every night in between.
        Schedule.objects.filter(pk=spring.pk).update(
            enabled=False,
            disabled_by="tests",
            disabled_reason="the spring window of the rrule test is over",
            disabled_at=SPRING_END,
        )
        walk(
            [replica],
            clock,
            autumn,
            stops=steps(AUTUMN_START, AUTUMN_END, AUTUMN_RUNS),
            runs=AUTUMN_RUNS,
            after=AUTUMN_AFTER,
        )
        stop_cleanly(replica)
    finally:
        replica.stop()

    assert_record(spring, runs=SPRING_RUNS, excluded=SPRING_EXCLUDED)
    assert_record(autumn, runs=AUTUMN_RUNS)
    assert Effect.objects.count() == len(SPRING_RUNS) + len(AUTUMN_RUNS)


@pytest.mark.processes
def test_good_fridays_run_moves_to_the_next_business_day_in_summer_time(tmp_path: Path) -> None:
    fridays = clocked_schedule("rrule.fridays", FRIDAYS, SPRING_START)
    clock = FileClock(tmp_path / "clock", SPRING_START)
    replica = clocked_replica("fridays", tmp_path, clock)
    try:
        walk(
            [replica],
            clock,
            fridays,
            stops=steps(SPRING_START, SPRING_END, [GOOD_FRIDAY, *FRIDAY_RUNS]),
            runs=FRIDAY_RUNS,
            after=FRIDAY_AFTER,
        )
        stop_cleanly(replica)
    finally:
        replica.stop()

    # Moved, not skipped: nothing is recorded for Good Friday itself.
    assert_record(fridays, runs=FRIDAY_RUNS)
    assert not Occurrence.objects.filter(
        pk=occurrence_id(TENANT, fridays.key, GOOD_FRIDAY)
    ).exists()


@pytest.mark.processes
def test_a_pay_date_on_a_holiday_runs_once_on_the_previous_business_day(tmp_path: Path) -> None:
    # Seven days: when the record is rewound below, the pay run is still on time on 02-16, so
    # a replica planning it again decides to run it (not to skip it as missed).
    payroll = clocked_schedule("payroll.salaries", PAYROLL, PAY_START, max_delay=timedelta(days=7))
    clock = FileClock(tmp_path / "clock", PAY_START)
    replicas = [clocked_replica(name, tmp_path, clock) for name in ("payroll-a", "payroll-b")]
    try:
        # Both replicas race for each stop: ``settled`` waits until both have looked at it.
        walk(
            replicas,
            clock,
            payroll,
            stops=steps(PAY_START, PAY_END, [PAY_RUN, PAY_DATE]),
            runs=[PAY_RUN],
            after=PAY_AFTER,
        )
        # Whichever replica planned the pay run stops; the other plans the month again from
        # scratch, as a replica whose view of the schedule is behind would. It must derive
        # the same identity (its insert is a no-op), so nothing is added and nothing runs twice.
        # A pass logs ``plan.pass`` after its transaction commits: the walk saw the commit.
        wait_until(
            lambda: any(replica.logged("plan.pass") for replica in replicas),
            timeout=30,
            what="a replica to log the pass that planned the pay run",
        )
        planner = next(replica for replica in replicas if replica.logged("plan.pass"))
        (other,) = [replica for replica in replicas if replica is not planner]
        passes_before = other.logged("plan.pass")
        stop_cleanly(planner)
        Schedule.objects.filter(pk=payroll.pk).update(last_scheduled_at=None, next_due_at=PAY_START)
        store.notify("tests.rewound")
        wait_until(
            lambda: (
                planned_past(other, payroll, PAY_AFTER)
                and other.logged("plan.pass") > passes_before
            ),
            timeout=60,
            what=lambda: f"{other.name} to plan the rewound payroll again: {log_tail(other)}",
        )
        passes = [e["planned"] for e in other.events() if e.get("event") == "plan.pass"]
        assert passes[passes_before:] == [1], f"{other.name} decided to run the pay run again"
        # The pass that moved next_due_at committed its inserts with it: a second identity
        # would show here, whatever state its occurrence has reached.
        assert Occurrence.objects.filter(schedule=payroll).count() == 1, (
            f"{other.name} planned the pay run under another identity"
        )
        stop_cleanly(other)
    finally:
        for replica in replicas:
            replica.stop()

    assert_record(payroll, runs=[PAY_RUN])
    # Nothing at all for the date the rule names, under its instant or its identity.
    assert not Occurrence.objects.filter(schedule=payroll, scheduled_at=PAY_DATE).exists()
    assert not Occurrence.objects.filter(pk=occurrence_id(TENANT, payroll.key, PAY_DATE)).exists()
    assert Effect.objects.count() == 1
