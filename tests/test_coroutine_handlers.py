"""Coroutine (``async def``) handlers run to completion on the run thread's terms, are cancelled
through their task, and a handler that hands back unfinished work is failed, never completed."""

from __future__ import annotations

import asyncio
import inspect
import re
import signal
import threading
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from django_jobs.exceptions import ConfigurationError, JobsError
from django_jobs.models import Attempt, AttemptOutcome, Occurrence, OccurrenceState, Schedule
from django_jobs.registry import Registry
from django_jobs.store import Lease
from django_jobs.testing import FakeClock
from django_jobs.worker.invoke import call_handler
from django_jobs.worker.loop import Worker
from django_jobs.worker.run import Run
from tests.workerapp.models import Effect

from .concurrency import wait_until
from .factories import T0, ScheduleFactory
from .storeutil import LEASE, claim, plan

NOW = datetime.now(UTC)  # the processes use the real clock: plan work that is already due


@pytest.fixture
def jobs() -> Registry:
    return Registry()


@pytest.fixture
def effects() -> None:
    # Created inside the test's transaction: only this thread's connection can see the table,
    # so a write that lands in it was made on the run thread's connection.
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE test_effects (occurrence text NOT NULL)")


def insert_effect(run: Run) -> None:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO test_effects VALUES (%s)", [run.occurrence_key])


def effect_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM test_effects")
        return int(cursor.fetchone()[0])


def due(job: str, **fields: object) -> Schedule:
    schedule = ScheduleFactory.create(job=job, **fields)
    plan(schedule, T0, now=T0)
    return schedule


# --- running coroutine handlers (inline) -----------------------------------------------------


@pytest.mark.django_db
def test_a_coroutine_handler_is_awaited_and_its_write_commits_with_the_completion(
    jobs, worker, clock, effects
) -> None:
    threads: dict[str, int] = {}

    def write(run: Run) -> None:
        threads["sync"] = threading.get_ident()
        with run.atomic():
            insert_effect(run)

    async def handler(run: Run) -> None:
        threads["coroutine"] = threading.get_ident()
        await asyncio.sleep(0)
        await sync_to_async(write)(run)

    jobs.register("tests.async", handler)
    due("tests.async")
    clock.set(T0)

    assert list(worker.run_pass().outcomes.elements()) == ["completed"]
    assert effect_count() == 1
    assert Attempt.objects.get().outcome == AttemptOutcome.SUCCEEDED
    # The coroutine ran on its event loop's thread; its sync_to_async call on the run thread.
    assert threads["sync"] == threading.get_ident() != threads["coroutine"]


@pytest.mark.django_db
def test_a_coroutine_handlers_write_rolls_back_when_another_replica_took_over(
    jobs, worker, clock, effects
) -> None:
    def take_over() -> None:
        clock.advance(LEASE + timedelta(seconds=1))
        claim("replica-2", clock.now())

    def write(run: Run) -> None:
        with run.atomic():
            insert_effect(run)

    async def zombie(run: Run) -> None:
        await sync_to_async(take_over)()
        await sync_to_async(write)(run)

    jobs.register("tests.async-zombie", zombie)
    due("tests.async-zombie")
    clock.set(T0)

    assert list(worker.run_pass().outcomes.elements()) == ["lease_lost"]
    assert effect_count() == 0
    occurrence = Occurrence.objects.get()
    assert (occurrence.state, occurrence.lease_owner) == (OccurrenceState.PROCESSING, "replica-2")


@pytest.mark.django_db
def test_a_cancellation_landing_while_run_atomic_commits_leaves_the_run_completed(
    jobs, worker, clock, effects
) -> None:
    seen: list[str] = []

    def write(run: Run) -> None:
        with run.atomic():
            insert_effect(run)
            (active,) = worker.running()
            active.cancel.set()  # the worker cancels the run while this block still runs
            wait_until(lambda: seen == ["cancelled"], timeout=10, what="the task's cancellation")

    async def handler(run: Run) -> None:
        try:
            await sync_to_async(write)(run)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    jobs.register("tests.async-cancelled-in-atomic", handler)
    due("tests.async-cancelled-in-atomic")
    clock.set(T0)

    # The task was cancelled at its await, but the block and the completion committed.
    assert list(worker.run_pass().outcomes.elements()) == ["completed"]
    assert (effect_count(), seen) == (1, ["cancelled"])
    assert Attempt.objects.get().outcome == AttemptOutcome.SUCCEEDED


@pytest.mark.django_db
def test_an_orm_call_made_in_the_coroutine_itself_fails_the_attempt(jobs, worker, clock) -> None:
    async def queries_in_the_loop(run: Run) -> None:
        Occurrence.objects.count()  # not through sync_to_async: Django refuses it here

    jobs.register("tests.async-orm", queries_in_the_loop)
    due("tests.async-orm", max_attempts=1)
    clock.set(T0)

    assert list(worker.run_pass().outcomes.elements()) == ["dead"]
    occurrence = Occurrence.objects.get()
    assert occurrence.last_error_type == "django.core.exceptions.SynchronousOnlyOperation"


@pytest.mark.django_db
def test_atomic_async_commits_the_block_with_the_completion(jobs, worker, clock, effects) -> None:
    results: list[str] = []

    async def handler(run: Run) -> None:
        def block() -> str:
            insert_effect(run)
            return "written"

        results.append(await run.atomic_async(block))

    jobs.register("tests.atomic-async", handler)
    due("tests.atomic-async")
    clock.set(T0)

    assert list(worker.run_pass().outcomes.elements()) == ["completed"]
    assert (effect_count(), results) == (1, ["written"])
    assert Occurrence.objects.get().state == OccurrenceState.COMPLETED


@pytest.mark.django_db
def test_once_async_skips_a_step_that_already_happened(jobs, worker, clock) -> None:
    sent: list[int] = []

    async def mail(run: Run) -> None:
        async def send() -> str:
            await asyncio.sleep(0)
            sent.append(run.attempt)
            return "sent"

        await run.once_async("mail-sent", send)
        if run.attempt == 1:
            raise RuntimeError("crashed after sending")

    jobs.register("tests.async-mail", mail)
    due("tests.async-mail", backoff=timedelta(0))
    clock.set(T0)
    # No backoff: the retry is due at once and runs in the same pass.
    assert sorted(worker.run_pass().outcomes.elements()) == ["completed", "retry"]
    assert sent == [1]  # the second attempt skipped the step the first one did


# --- unfinished results are refused ----------------------------------------------------------


@pytest.mark.django_db
def test_a_sync_handler_returning_a_coroutine_is_failed_not_completed(jobs, worker, clock) -> None:
    ran: list[str] = []
    returned: list[object] = []

    async def body(run: Run) -> None:
        ran.append(run.occurrence_key)

    def forgets_to_await(run: Run) -> object:
        coroutine = body(run)
        returned.append(coroutine)
        return coroutine

    jobs.register("tests.returns-coroutine", forgets_to_await)
    due("tests.returns-coroutine", max_attempts=1)
    clock.set(T0)

    assert list(worker.run_pass().outcomes.elements()) == ["dead"]
    occurrence = Occurrence.objects.get()
    assert occurrence.last_error_type == "django_jobs.exceptions.JobsError"
    assert occurrence.last_error_message == (
        "job 'tests.returns-coroutine' returned a coroutine: declare the handler with async def "
        "so the worker awaits it"
    )
    (coroutine,) = returned
    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED  # type: ignore[arg-type]
    assert ran == []


@pytest.mark.django_db
def test_a_sync_handler_returning_a_generator_is_failed_not_completed(jobs, worker, clock) -> None:
    returned: list[object] = []

    def items(run: Run) -> Iterator[str]:
        yield run.occurrence_key

    def returns_generator(run: Run) -> object:
        generator = items(run)
        returned.append(generator)
        return generator

    jobs.register("tests.returns-generator", returns_generator)
    due("tests.returns-generator")
    clock.set(T0)

    assert list(worker.run_pass().outcomes.elements()) == ["retry"]
    occurrence = Occurrence.objects.get()
    assert occurrence.state == OccurrenceState.FAILED
    assert occurrence.last_error_message == (
        "job 'tests.returns-generator' returned a generator; handlers must run to completion, "
        "not yield"
    )
    (generator,) = returned
    assert inspect.getgeneratorstate(generator) == inspect.GEN_CLOSED  # type: ignore[arg-type]


def a_run() -> Run:
    lease = Lease(
        occurrence_id=uuid4(),
        token=1,
        owner="unit",
        expires_at=T0 + LEASE,
        schedule_id=1,
        tenant="",
        scheduled_at=T0,
        attempt=1,
        trigger="schedule",
    )
    return Run(lease, clock=FakeClock(T0), deadline=T0 + LEASE)


class Pending:
    """Awaitable, and not a coroutine."""

    def __await__(self) -> Iterator[None]:
        yield


async def agen() -> AsyncIterator[int]:
    yield 1


@pytest.mark.parametrize(
    ("make", "refusal"),
    [
        (Pending, "returned an awaitable (Pending) it did not wait for"),
        (agen, "returned an async generator; handlers must run to completion"),
        (lambda: iter([1]), "returned an iterator (list_iterator), work not done yet"),
        (lambda: map(str, [1]), "returned an iterator (map), work not done yet"),
    ],
)
def test_other_unfinished_results_are_refused(make, refusal) -> None:
    with pytest.raises(JobsError, match=rf"^job 'tests\.unit' {re.escape(refusal)}"):
        call_handler(lambda run: make(), a_run(), name="tests.unit")


def test_an_asyncio_future_is_refused() -> None:
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()
        with pytest.raises(JobsError, match=r"returned an awaitable \(Future\)"):
            call_handler(lambda run: future, a_run(), name="tests.unit")
    finally:
        loop.close()


@pytest.mark.parametrize("value", [None, 3, "done", [1, 2], {"sent": 2}])
def test_finished_results_are_accepted(value) -> None:
    call_handler(lambda run: value, a_run(), name="tests.unit")


@pytest.mark.parametrize("kind", ["generator", "async generator"])
def test_registering_a_generator_function_is_refused(kind) -> None:
    def gen(run: Run) -> Iterator[int]:
        yield 1

    async def async_gen(run: Run) -> AsyncIterator[int]:
        yield 1

    func = gen if kind == "generator" else async_gen
    with pytest.raises(ConfigurationError) as raised:
        Registry().register("tests.gen", func)
    assert str(raised.value).startswith(
        f"job 'tests.gen': {func.__qualname__} is {'an' if kind[0] == 'a' else 'a'} {kind} "
        "function; a handler must run to completion and return, not yield."
    )


# --- event loops are not shared between runs (run threads) -----------------------------------


@pytest.mark.django_db(transaction=True)  # runs execute on their own threads and connections
def test_each_coroutine_run_gets_a_fresh_event_loop_and_leaves_no_task_behind(clock) -> None:
    jobs = Registry()
    loops: list[asyncio.AbstractEventLoop] = []
    run_threads: list[str] = []
    leftovers: list[str] = []

    async def forgotten() -> None:
        try:
            await asyncio.sleep(600)
        except asyncio.CancelledError:
            leftovers.append("cancelled with its run's loop")
            raise

    async def spawns_and_returns(run: Run) -> None:
        loops.append(asyncio.get_running_loop())
        run_threads.append(await sync_to_async(lambda: threading.current_thread().name)())
        asyncio.get_running_loop().create_task(forgotten())  # never awaited by the handler

    jobs.register("tests.async-spawns", spawns_and_returns)
    for n in range(2):
        plan(ScheduleFactory.create(job="tests.async-spawns"), T0 + timedelta(seconds=n), now=T0)
    worker = Worker(replica_id="loops", clock=clock, jobs=jobs, listen=False, concurrency=1)
    try:
        for n in range(2):  # one due occurrence per pass, on the pool's one thread
            clock.set(T0 + timedelta(seconds=n))
            worker.run_pass()
            assert Occurrence.objects.filter(state=OccurrenceState.COMPLETED).count() == n + 1
            # The loop of this run is closed and its leftover task was cancelled with it.
            assert loops[n].is_closed()
            assert len(leftovers) == n + 1
    finally:
        worker.close()
    assert loops[0] is not loops[1]
    assert run_threads[0] == run_threads[1]
    assert run_threads[0].startswith("django_jobs-run")


# --- real runworker processes ----------------------------------------------------------------


def due_now(job: str, **fields: object) -> Schedule:
    schedule = ScheduleFactory.create(job=job, **fields)
    plan(schedule, NOW - timedelta(minutes=10), now=NOW)
    return schedule


def state_of(schedule: Schedule) -> Counter[str]:
    return Counter(Occurrence.objects.filter(schedule=schedule).values_list("state", flat=True))


@pytest.mark.django_db(transaction=True)
def test_runworker_awaits_a_coroutine_handler_and_records_its_one_effect(start) -> None:
    schedule = due_now("proc.async_effect")
    replica = start("async")
    wait_until(lambda: state_of(schedule)["completed"] == 1, timeout=60, what="the completion")

    occurrence = Occurrence.objects.get(schedule=schedule)
    (attempt,) = Attempt.objects.filter(occurrence=occurrence)
    assert attempt.outcome == AttemptOutcome.SUCCEEDED
    assert list(Effect.objects.values_list("occurrence_key", "token")) == [
        (str(occurrence.pk), attempt.fencing_token)
    ]
    replica.signal(signal.SIGTERM)
    assert replica.wait_exit() == 0


@pytest.mark.django_db(transaction=True)
def test_runworker_retries_a_failing_coroutine_handler_then_dead_letters_it(start) -> None:
    schedule = due_now("proc.async_fails", max_attempts=3, backoff=timedelta(milliseconds=200))
    replica = start("async-retrier")
    wait_until(lambda: state_of(schedule)["dead"] == 1, timeout=60, what="the occurrence to die")

    attempts = Attempt.objects.filter(occurrence__schedule=schedule).order_by("number")
    assert [(a.trigger, a.outcome) for a in attempts] == [
        ("schedule", "failed"),
        ("retry", "failed"),
        ("retry", "failed"),
    ]
    dead = Occurrence.objects.get(schedule=schedule)
    assert (dead.last_error_type, dead.last_error_message) == (
        "RuntimeError",
        "async attempt 3 failed",
    )
    replica.signal(signal.SIGTERM)
    assert replica.wait_exit() == 0


@pytest.mark.django_db(transaction=True)
def test_runworker_cancels_a_coroutine_handler_at_its_timeout_through_its_task(
    start, tmp_path
) -> None:
    schedule = due_now("proc.async_sleeps", timeout=timedelta(seconds=1), max_attempts=1)
    occurrence = Occurrence.objects.get(schedule=schedule)
    replica = start(
        "async-timeout", env={"JOBS_LEASE_SECONDS": "60", "JOBS_TIMEOUT_GRACE_SECONDS": "5"}
    )
    wait_until(lambda: state_of(schedule)["dead"] == 1, timeout=60, what="the timed-out attempt")

    (attempt,) = Attempt.objects.filter(occurrence=occurrence)
    assert attempt.outcome == AttemptOutcome.TIMED_OUT
    dead = Occurrence.objects.get(pk=occurrence.pk)
    assert dead.last_error_type == "django_jobs.exceptions.Cancelled"
    assert dead.last_error_message.startswith("job 'proc.async_sleeps' was cancelled at an await")
    assert (tmp_path / f"cancelled-{occurrence.pk}").exists()  # the task saw CancelledError
    # Cancelled well inside the grace: not cut off, so the worker has no reason to restart.
    assert replica.logged("run.timed_out") == 1
    assert replica.logged("run.cut_off") == 0
    replica.signal(signal.SIGTERM)
    assert replica.wait_exit() == 0


@pytest.mark.django_db(transaction=True)
def test_runworker_cuts_off_a_coroutine_handler_that_blocks_its_event_loop(start) -> None:
    schedule = due_now("proc.async_blocks", timeout=timedelta(seconds=1), max_attempts=3)
    replica = start("async-cutter", env={"JOBS_LEASE_SECONDS": "60"})

    assert replica.wait_exit(timeout=60) == 3  # asks its supervisor for a restart

    (attempt,) = Attempt.objects.filter(occurrence__schedule=schedule)
    assert attempt.outcome == AttemptOutcome.TIMED_OUT
    occurrence = Occurrence.objects.get(schedule=schedule)
    assert (occurrence.state, occurrence.failures, occurrence.lease_owner) == ("failed", 1, "")
    assert replica.logged("run.cut_off") == 1


@pytest.mark.django_db(transaction=True)
def test_sigterm_cancels_a_coroutine_handler_and_releases_its_occurrence(start, tmp_path) -> None:
    schedule = due_now("proc.async_sleeps")
    occurrence = Occurrence.objects.get(schedule=schedule)
    replica = start(
        "async-drain", env={"JOBS_LEASE_SECONDS": "60", "JOBS_SHUTDOWN_GRACE_SECONDS": "1"}
    )
    wait_until(lambda: (tmp_path / f"started-{occurrence.pk}").exists(), what="the run to start")

    replica.signal(signal.SIGTERM)
    assert replica.wait_exit(timeout=30) == 0

    assert (tmp_path / f"cancelled-{occurrence.pk}").exists()
    released = Occurrence.objects.get(pk=occurrence.pk)
    assert (released.state, released.lease_owner) == (OccurrenceState.SCHEDULED, "")
    (attempt,) = Attempt.objects.filter(occurrence=occurrence)
    assert attempt.outcome == AttemptOutcome.RELEASED
