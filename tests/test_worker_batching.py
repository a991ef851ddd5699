"""The hot path's batching: completions group-committed by the completer, claims made ahead of
the free run threads while runs are short. Each keeps fencing and leases intact."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta

import pytest

from django_jobs import store
from django_jobs.conf import get_settings
from django_jobs.models import Attempt, AttemptOutcome, Occurrence, OccurrenceState
from django_jobs.registry import Registry
from django_jobs.worker.completer import Completer
from django_jobs.worker.inflight import ActiveRun
from django_jobs.worker.loop import Worker
from django_jobs.worker.outcomes import Outcome
from django_jobs.worker.run import Run

from .concurrency import wait_until
from .factories import T0, ScheduleFactory
from .storeutil import LEASE, claim, plan

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_completer_writes_a_batch_in_one_statement_and_refuses_a_stale_lease(clock) -> None:
    schedule = ScheduleFactory.create()
    plan(schedule, *[T0 + timedelta(seconds=n) for n in range(3)], now=T0)
    now = T0 + timedelta(seconds=3)
    leases = claim("replica-1", now)
    assert len(leases) == 3
    # Two leases are renewed; the third expires and another replica takes it over.
    kept = store.renew(leases[:2], owner="replica-1", now=now + LEASE / 2, lease_for=LEASE)
    stale = leases[2]
    (stolen,) = claim("thief", stale.expires_at + timedelta(seconds=1))
    assert stolen.occurrence_id == stale.occurrence_id

    done: dict[object, Outcome] = {}
    completer = Completer(
        clock=clock,
        on_done=lambda active, outcome: done.__setitem__(active.lease.occurrence_id, outcome),
        stop_writing=threading.Event(),
    )
    clock.set(stale.expires_at + timedelta(seconds=2))
    for lease in [*kept, stale]:  # queued before the thread starts: one batch
        completer.submit(ActiveRun(lease=lease, schedule=schedule, deadline=now + LEASE))
    completer.start()
    completer.stop()
    completer.join(timeout=30)

    assert not completer.is_alive()
    assert not completer.busy()
    assert done == {
        kept[0].occurrence_id: Outcome.COMPLETED,
        kept[1].occurrence_id: Outcome.COMPLETED,
        stale.occurrence_id: Outcome.LEASE_LOST,
    }
    completed = Occurrence.objects.filter(state=OccurrenceState.COMPLETED)
    assert {o.id for o in completed} == {lease.occurrence_id for lease in kept}
    assert len({o.finished_at for o in completed}) == 1, "one statement, one instant"
    taken = Occurrence.objects.get(id=stale.occurrence_id)
    assert (taken.state, taken.lease_owner, taken.fencing_token) == (
        OccurrenceState.PROCESSING,
        "thief",
        stolen.token,
    )
    assert not Attempt.objects.filter(
        occurrence_id=stale.occurrence_id, outcome=AttemptOutcome.SUCCEEDED
    ).exists()


@pytest.fixture
def quick_runs_are_short(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of a handler that returns at once counts as short however loaded the machine: its
    measured duration (wall-clock time, with the attempt's writes) stays far under 5 s, not
    always under ``SHORT_RUN``'s 0.1 s on two contended cores. The long-run test keeps 0.1 s."""
    monkeypatch.setattr("django_jobs.worker.threads.SHORT_RUN", 5.0)


def _worker(jobs: Registry, clock, *, concurrency: int, ahead: int, **settings) -> Worker:
    worker = Worker(
        replica_id="batching",
        clock=clock,
        jobs=jobs,
        listen=False,
        concurrency=concurrency,
        settings=replace(get_settings(), CLAIM_AHEAD=ahead, **settings),
    )
    worker._ensure_keeper()  # the lease keeper and the completer, as serve() starts them
    return worker


def test_a_replica_whose_runs_are_short_claims_ahead_of_its_free_threads(
    clock, quick_runs_are_short
) -> None:
    jobs = Registry()
    ran: list[object] = []
    jobs.register("tests.quick", lambda run: ran.append(run.scheduled_at))
    schedule = ScheduleFactory.create(job="tests.quick")
    plan(schedule, *[T0 + timedelta(seconds=n) for n in range(10)], now=T0)
    clock.set(T0 + timedelta(seconds=10))
    worker = _worker(jobs, clock, concurrency=1, ahead=3)
    try:
        assert worker.step() == (1, 1), "no run measured yet: only the free thread"
        wait_until(lambda: not worker._busy(), what="the runs and their completions")
        assert worker.step() == (4, 4), "short runs: the free thread and three ahead"
        wait_until(lambda: not worker._busy(), what="the runs and their completions")
    finally:
        worker.close()
    assert len(ran) == 5
    assert Occurrence.objects.filter(state=OccurrenceState.COMPLETED).count() == 5
    assert Occurrence.objects.filter(state=OccurrenceState.SCHEDULED).count() == 5


def test_a_replica_whose_runs_are_long_claims_only_what_it_can_start(clock) -> None:
    jobs = Registry()
    jobs.register("tests.long", lambda run: threading.Event().wait(0.2))  # a 0.2 s job
    schedule = ScheduleFactory.create(job="tests.long")
    plan(schedule, *[T0 + timedelta(seconds=n) for n in range(5)], now=T0)
    clock.set(T0 + timedelta(seconds=5))
    worker = _worker(jobs, clock, concurrency=1, ahead=3)
    try:
        assert worker.step() == (1, 1)
        wait_until(lambda: not worker._busy(), what="the runs and their completions")
        assert worker.step() == (1, 1), "the last run took 0.2 s: nothing claimed ahead"
        wait_until(lambda: not worker._busy(), what="the runs and their completions")
    finally:
        worker.close()
    assert Occurrence.objects.filter(state=OccurrenceState.COMPLETED).count() == 2


def test_occurrences_claimed_ahead_are_released_unrun_on_shutdown(
    clock, quick_runs_are_short
) -> None:
    jobs = Registry()
    entered: list[object] = []

    def quick(run: Run) -> None:
        pass

    def gate(run: Run) -> None:
        entered.append(run.scheduled_at)
        wait_until(lambda: run.cancelled, what="the shutdown to cancel the run")
        run.raise_if_cancelled()

    jobs.register("tests.quick", quick)
    jobs.register("tests.gate", gate)
    first = ScheduleFactory.create(job="tests.quick")
    gated = ScheduleFactory.create(job="tests.gate")
    plan(first, T0, now=T0)
    plan(gated, *[T0 + timedelta(seconds=n) for n in range(1, 4)], now=T0)
    clock.set(T0 + timedelta(seconds=5))
    worker = _worker(jobs, clock, concurrency=1, ahead=2, SHUTDOWN_GRACE_SECONDS=0)
    try:
        assert worker.step() == (1, 1)  # the quick run: now runs are known to be short
        wait_until(lambda: not worker._busy(), what="the runs and their completions")
        assert worker.step() == (3, 3)  # one gated run starts, two wait for the thread
        wait_until(lambda: len(entered) == 1, what="the gated run to start")
        worker.request_stop()
        assert worker._shutdown() == 0
    finally:
        worker.close()

    assert len(entered) == 1, "the runs claimed ahead never started"
    gated_rows = Occurrence.objects.filter(schedule=gated)
    assert {o.state for o in gated_rows} == {OccurrenceState.SCHEDULED}
    assert all(o.lease_owner == "" for o in gated_rows)
    # The started run was released; the two claimed ahead say they never started.
    assert sorted(
        Attempt.objects.filter(occurrence__schedule=gated).values_list("outcome", flat=True)
    ) == [AttemptOutcome.RELEASED, AttemptOutcome.UNSTARTED, AttemptOutcome.UNSTARTED]
    assert {o.failures for o in gated_rows} == {0}
    # Claimable again at once by any replica.
    assert len(claim("other", T0 + timedelta(seconds=5))) == 3


def test_a_claim_returns_each_occurrence_with_the_schedule_fields_its_run_reads() -> None:
    schedule = ScheduleFactory.create(
        tenant="acme", job="tests.quick", timeout=timedelta(minutes=7), max_attempts=4
    )
    plan(schedule, T0, now=T0)
    ((lease, loaded),) = store.claim_runs(
        owner="replica-1", now=T0 + timedelta(seconds=1), lease_for=LEASE, limit=10
    )
    assert lease.schedule_id == loaded.pk == schedule.pk
    for name in store.RUN_FIELDS:
        assert getattr(loaded, name) == getattr(schedule, name), name
    assert loaded.get_deferred_fields() >= {"operating_owner", "cron"}
    assert loaded.operating_owner == schedule.operating_owner  # loads on access
