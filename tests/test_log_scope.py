"""The worker's log lines carry only the worker's context: what a job handler binds to
structlog's context (a partner's DSN, another tenant) is gone before the worker logs the
outcome, and the run's reserved keys keep the worker's values. With ``keep_run_keys``
configured, the handler's own lines keep them too.

The lines are read through a processor chain that merges the context
(``structlog.testing.capture_logs`` alone drops ``merge_contextvars``: it would see no context,
so it could not tell a leak from none).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
import structlog
from asgiref.sync import sync_to_async
from django.db import connection
from structlog.testing import LogCapture
from structlog.typing import EventDict

from django_jobs.conf import get_settings
from django_jobs.logging import RESERVED_KEYS, keep_run_keys
from django_jobs.models import Attempt, Occurrence, Schedule
from django_jobs.registry import Handler, Registry
from django_jobs.testing import FakeClock
from django_jobs.worker.loop import Worker
from django_jobs.worker.run import Run

from .concurrency import wait_until
from .factories import T0, ScheduleFactory
from .storeutil import LEASE, claim, plan

SECRET = "https://svc:hunter2@partner.example"
# What a handler binds: a secret of its own, and a value for every key the worker reserves.
BOUND = {
    "partner_dsn": SECRET,
    "tenant": "globex",
    "occurrence": "forged-occurrence",
    "schedule": "forged-schedule",
    "attempt": 99,
    "token": 999,
}


class PartnerDown(Exception):
    pass


class Escape(BaseException):
    """Not an ``Exception``: still the handler's failure, like ``SystemExit``."""


# --- reading the lines -------------------------------------------------------------------------


def capture(*processors: Any) -> Iterator[LogCapture]:
    old = structlog.get_config()
    logs = LogCapture()
    structlog.configure(processors=[structlog.contextvars.merge_contextvars, *processors, logs])
    try:
        yield logs
    finally:
        structlog.configure(**old)


@pytest.fixture
def logs() -> Iterator[LogCapture]:
    """The lines with the context merged in, and no other processor."""
    yield from capture()


@pytest.fixture
def kept_logs() -> Iterator[LogCapture]:
    """The lines as the example project configures them: ``keep_run_keys`` after the merge."""
    yield from capture(keep_run_keys)


def line(logs: LogCapture, event: str) -> EventDict:
    (found,) = [entry for entry in logs.entries if entry["event"] == event]
    return found


def the_runs_keys(schedule: Schedule) -> dict[str, object]:
    """The reserved keys of the one run of ``schedule`` (its first claim)."""
    occurrence = Occurrence.objects.get(schedule=schedule)
    return {
        "schedule": str(schedule),
        "occurrence": str(occurrence.pk),
        "attempt": 1,
        "tenant": "acme",
        "token": Attempt.objects.get(occurrence=occurrence, number=1).fencing_token,
    }


def assert_only_the_workers(logs: LogCapture, event: str, schedule: Schedule) -> None:
    """No line carries what the handler bound; the outcome's line has the run's own keys."""
    assert logs.entries
    for entry in logs.entries:
        assert "partner_dsn" not in entry
        assert SECRET not in repr(entry)
        assert "globex" not in repr(entry)
    outcome = line(logs, event)
    assert {key: outcome.get(key) for key in RESERVED_KEYS} == the_runs_keys(schedule)


# --- handlers that bind ------------------------------------------------------------------------


def binding(kind: str, then: Callable[[Run], object]) -> Handler:
    """A handler (``sync`` or ``async``) that binds ``BOUND`` and then does ``then``."""

    def sync(run: Run) -> None:
        structlog.contextvars.bind_contextvars(**BOUND)
        then(run)

    async def coroutine(run: Run) -> None:
        structlog.contextvars.bind_contextvars(**BOUND)
        await asyncio.sleep(0)
        result = then(run)
        if asyncio.iscoroutine(result):
            await result

    return sync if kind == "sync" else coroutine


def returns(run: Run) -> None:
    pass


def fails(run: Run) -> None:
    raise PartnerDown(f"could not reach the partner for {run.occurrence_key}")


def due(jobs: Registry, handler: Handler, **fields: object) -> Schedule:
    jobs.register("tests.binds", handler)
    schedule = ScheduleFactory.create(job="tests.binds", tenant="acme", **fields)
    plan(schedule, T0, now=T0)
    return schedule


@pytest.fixture
def jobs() -> Registry:
    return Registry()


@pytest.fixture
def inline(jobs: Registry, clock: FakeClock, inline_worker: Callable[..., Worker]) -> Worker:
    """Runs in the test's thread and transaction."""
    clock.set(T0)
    return inline_worker(jobs)


@pytest.fixture
def threaded(jobs: Registry, clock: FakeClock) -> Iterator[Worker]:
    """Runs on a run thread, completions written by the completer; a stop drains at once."""
    worker = Worker(
        replica_id="replica-1",
        clock=clock,
        jobs=jobs,
        settings=replace(get_settings(), SHUTDOWN_GRACE_SECONDS=0),
        listen=False,
    )
    clock.set(T0)
    yield worker
    worker.close()


KINDS = ["sync", "async"]


# --- the worker's lines, inline ----------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("then", "max_attempts", "outcome", "event"),
    [
        (returns, 3, "completed", "occurrence.completed"),
        (fails, 3, "retry", "occurrence.failed"),
        (fails, 1, "dead", "occurrence.dead"),
    ],
    ids=["completed", "failed", "dead"],
)
def test_what_a_handler_binds_never_reaches_the_workers_outcome_line(
    jobs, inline, logs, kind, then, max_attempts, outcome, event
) -> None:
    schedule = due(jobs, binding(kind, then), max_attempts=max_attempts)

    assert list(inline.run_pass().outcomes.elements()) == [outcome]
    assert_only_the_workers(logs, event, schedule)
    # The caller of an inline run gets its own context back, without the handler's keys.
    assert structlog.contextvars.get_contextvars() == {}


@pytest.mark.django_db
@pytest.mark.parametrize("kind", KINDS)
def test_a_handler_that_lost_its_lease_does_not_bind_the_lease_lost_line(
    jobs, inline, logs, clock, kind
) -> None:
    def take_over(run: Run) -> None:
        clock.advance(LEASE + timedelta(seconds=1))
        claim("replica-2", clock.now())

    schedule = due(jobs, binding(kind, sync_to_async(take_over) if kind == "async" else take_over))

    assert list(inline.run_pass().outcomes.elements()) == ["lease_lost"]
    (event,) = {e["event"] for e in logs.entries} & {"lease.lost", "occurrence.fenced_out"}
    assert_only_the_workers(logs, event, schedule)


@pytest.mark.django_db
def test_an_inline_run_restores_the_callers_own_context(jobs, inline, logs) -> None:
    schedule = due(jobs, binding("sync", returns))
    structlog.contextvars.bind_contextvars(request_id="r-1", tenant="caller's")
    try:
        inline.run_pass()
        assert structlog.contextvars.get_contextvars() == {
            "request_id": "r-1",
            "tenant": "caller's",
        }
    finally:
        structlog.contextvars.clear_contextvars()
    completed = line(logs, "occurrence.completed")
    assert (completed["tenant"], completed["request_id"]) == ("acme", "r-1")
    assert completed["occurrence"] == the_runs_keys(schedule)["occurrence"]


# --- the worker's lines, on run threads, the completer and the loop ----------------------------


def cancelled(kind: str) -> Callable[[Run], object]:
    """Wait (bounded) for the worker to cancel the run, then react as a handler should."""

    def sync(run: Run) -> None:
        wait_until(lambda: run.cancelled, what="the worker to cancel the run")
        run.raise_if_cancelled()

    async def coroutine() -> None:
        # The worker cancels the handler's task at this await.
        await asyncio.wait_for(asyncio.Event().wait(), timeout=30)

    return sync if kind == "sync" else lambda run: coroutine()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", KINDS)
def test_the_completers_line_carries_the_runs_keys_not_the_handlers(
    jobs, threaded, logs, kind
) -> None:
    schedule = due(jobs, binding(kind, returns))

    assert list(threaded.run_pass().outcomes.elements()) == ["completed"]
    assert_only_the_workers(logs, "occurrence.completed", schedule)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", KINDS)
def test_a_timed_out_handlers_bindings_are_not_in_the_failed_line(
    jobs, threaded, logs, clock, kind
) -> None:
    wait = cancelled(kind)

    def past_its_timeout(run: Run) -> object:
        clock.advance(timedelta(seconds=6))
        return wait(run)

    schedule = due(jobs, binding(kind, past_its_timeout), timeout=timedelta(seconds=5))

    assert list(threaded.run_pass().outcomes.elements()) == ["timed_out"]
    assert_only_the_workers(logs, "occurrence.failed", schedule)
    assert line(logs, "occurrence.failed")["outcome"] == "timed_out"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", KINDS)
def test_a_handler_released_at_shutdown_does_not_bind_the_released_line(
    jobs, threaded, logs, kind
) -> None:
    wait = cancelled(kind)

    def stops_the_worker(run: Run) -> object:
        threaded.request_stop()
        return wait(run)

    schedule = due(jobs, binding(kind, stops_the_worker))

    assert list(threaded.run_pass().outcomes.elements()) == ["released"]
    assert_only_the_workers(logs, "occurrence.released", schedule)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", KINDS)
def test_a_handler_that_ends_its_own_session_does_not_bind_the_failure_line(
    jobs, threaded, logs, kind
) -> None:
    """It terminated its own backend while the store answers: its failure, not an outage."""

    def terminate(run: Run) -> None:
        with connection.cursor() as cursor:  # the store's connection, on the run thread
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    schedule = due(jobs, binding(kind, sync_to_async(terminate) if kind == "async" else terminate))

    assert sorted(threaded.run_pass().outcomes.elements()) == ["retry"]
    assert_only_the_workers(logs, "occurrence.failed", schedule)


@pytest.mark.django_db(transaction=True)
def test_a_base_exception_is_the_handlers_failure_logged_with_the_runs_keys(
    jobs, threaded, logs
) -> None:
    def escapes(run: Run) -> None:
        raise Escape("not an Exception")

    schedule = due(jobs, binding("sync", escapes))

    assert sorted(threaded.run_pass().outcomes.elements()) == ["retry"]
    assert_only_the_workers(logs, "occurrence.failed", schedule)


# --- the handler's own lines, with keep_run_keys -----------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("kind", KINDS)
def test_with_keep_run_keys_a_handlers_own_line_keeps_the_runs_tenant(
    jobs, inline, kept_logs, kind
) -> None:
    def says(run: Run) -> None:
        structlog.get_logger("tests.handler").info("partner.called", token="api-token")

    schedule = due(jobs, binding(kind, says))

    assert list(inline.run_pass().outcomes.elements()) == ["completed"]
    own = line(kept_logs, "partner.called")
    assert {key: own[key] for key in RESERVED_KEYS} == the_runs_keys(schedule)
    # What the handler said is kept, under names that cannot pass for the worker's.
    assert {key: own[f"handler_{key}"] for key in RESERVED_KEYS} == {
        **{key: BOUND[key] for key in RESERVED_KEYS},
        "token": "api-token",  # passed in the call: the call's value, not the bound one
    }
    assert own["partner_dsn"] == SECRET  # the handler's line, the handler's business
    completed = line(kept_logs, "occurrence.completed")
    assert "partner_dsn" not in completed
    assert not any(key.startswith("handler_") for key in completed)
    assert {key: completed[key] for key in RESERVED_KEYS} == the_runs_keys(schedule)


def test_keep_run_keys_leaves_lines_outside_a_run_alone() -> None:
    event = {"event": "billing.sent", "tenant": "globex", "token": "api-token"}
    assert keep_run_keys(None, "info", dict(event)) == event
