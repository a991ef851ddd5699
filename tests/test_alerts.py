"""Alerts (django_jobs/signals.py): each signal is sent once per event, after the write that
recorded it committed, by the real worker code paths; DJANGO_JOBS["ON_DEAD"]; the example
project's e-mail to a dead occurrence's record owner."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.db import connections, transaction
from django.dispatch import Signal
from django.test import override_settings
from structlog.testing import capture_logs

from django_jobs import signals, words
from django_jobs.checks import check_settings
from django_jobs.models import Occurrence, OccurrenceState, Replica, ReplicaState
from django_jobs.registry import Registry
from django_jobs.signals import OccurrenceEvent, ReplicaEvent
from django_jobs.worker.inflight import InFlight
from django_jobs.worker.planning import plan_due
from django_jobs.worker.replica import Heartbeat
from django_jobs.worker.run import Run

from .factories import T0, ScheduleFactory
from .storeutil import LEASE, claim, plan

SECRET = "hunter2-do-not-mail"
EXAMPLE_HOOK = "example_project.billing.alerts.email_record_owner"


class Rollback(Exception):
    pass


@pytest.fixture
def jobs() -> Registry:
    jobs = Registry()
    jobs.register("tests.fine", lambda run: None)

    def broken(run: Run) -> None:
        raise RuntimeError(f"could not connect: password={SECRET} refused")

    jobs.register("tests.broken", broken)
    return jobs


@pytest.fixture
def received() -> Iterator[Callable[[Signal], list[Any]]]:
    """``received(signal)``: connect a receiver recording the events ``signal`` delivers."""
    connected: list[tuple[Signal, Callable[..., None]]] = []

    def listen(signal: Signal) -> list[Any]:
        events: list[Any] = []

        def receiver(sender: type, *, event: Any, **kwargs: Any) -> None:
            events.append(event)

        signal.connect(receiver, weak=False)
        connected.append((signal, receiver))
        return events

    yield listen
    for signal, receiver in connected:
        signal.disconnect(receiver)


@pytest.fixture
def on_dead_example() -> Iterator[None]:
    """The example project's hook, connected as ``AppConfig.ready`` connects ON_DEAD."""
    with override_settings(DJANGO_JOBS={**get_settings_dict(), "ON_DEAD": EXAMPLE_HOOK}):
        assert signals.connect_on_dead()
        yield
    signals.connect_on_dead()  # the suite's settings name none: disconnected


def get_settings_dict() -> dict[str, Any]:
    from django.conf import settings

    return dict(settings.DJANGO_JOBS)


def dead_schedule(**fields: Any) -> Any:
    schedule = ScheduleFactory.create(
        tenant="acme", key="acme.nightly", job="tests.broken", max_attempts=1, **fields
    )
    plan(schedule, T0, now=T0)
    return schedule


def state_seen_by_another_connection(occurrence_id: Any) -> str | None:
    """The occurrence's state as a second connection reads it: only what was committed."""
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute(
                f"SELECT state FROM {Occurrence._meta.db_table} WHERE id = %s", [occurrence_id]
            )
            row = cursor.fetchone()
            return None if row is None else str(row[0])
    finally:
        other.close()


def heartbeat(replica_id: str, clock: Any) -> Heartbeat:
    """A replica's heartbeat as the worker makes it: declaring silent replicas gone."""
    return Heartbeat(
        replica_id=replica_id,
        clock=clock,
        started_at=clock.now(),
        concurrency=1,
        inflight=InFlight(),
        every=timedelta(seconds=5),
        lease=LEASE,
    )


# --- dead: once, after commit, and the example's e-mail --------------------------------------


@pytest.mark.django_db(transaction=True)
def test_dead_is_sent_once_after_commit_and_the_example_mails_the_safe_error(
    worker, clock, on_dead_example
) -> None:
    schedule = dead_schedule(record_owner="billing-lead@example.com")
    seen_committed: list[str | None] = []

    def check_committed(sender: type, *, event: OccurrenceEvent, **kwargs: Any) -> None:
        seen_committed.append(state_seen_by_another_connection(event.occurrence_id))

    signals.occurrence_dead.connect(check_committed, weak=False)
    try:
        clock.set(T0)
        assert list(worker.run_pass().outcomes.elements()) == ["dead"]
        worker.run_pass()  # nothing more: the dead occurrence is not sent again
    finally:
        signals.occurrence_dead.disconnect(check_committed)

    assert seen_committed == [OccurrenceState.DEAD]
    (email,) = mail.outbox
    occurrence = Occurrence.objects.get()
    assert email.to == ["billing-lead@example.com"]
    assert "acme/acme.nightly" in email.subject
    assert str(occurrence.pk) in email.subject
    assert "Attempts: 1" in email.body
    # The instant to the second in UTC, and what a replay would run (#37).
    assert f"scheduled at {words.instant(T0)}\n" in email.body
    assert "A replay runs it as attempt 2 with a fresh retry budget: up to 1 attempt" in email.body
    assert "RuntimeError: could not connect: password=[redacted] refused" in email.body
    assert SECRET not in email.body
    assert SECRET not in email.subject
    assert schedule.key in email.body


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_dead_letter_sends_nothing(worker, clock, received) -> None:
    dead_schedule()
    events = received(signals.occurrence_dead)
    clock.set(T0)

    def dead_then_roll_back() -> None:
        with transaction.atomic():
            assert list(worker.run_pass().outcomes.elements()) == ["dead"]
            raise Rollback

    with pytest.raises(Rollback):
        dead_then_roll_back()
    assert events == []
    assert Occurrence.objects.get().state == OccurrenceState.SCHEDULED


@pytest.mark.django_db(transaction=True)
def test_dead_event_carries_the_schedule_and_the_redacted_error(worker, clock, received) -> None:
    schedule = dead_schedule()
    events = received(signals.occurrence_dead)
    clock.set(T0)
    worker.run_pass()
    (event,) = events
    occurrence = Occurrence.objects.get()
    assert event == OccurrenceEvent(
        occurrence_id=occurrence.pk,
        schedule_id=schedule.pk,
        tenant="acme",
        key="acme.nightly",
        job="tests.broken",
        scheduled_at=T0,
        attempt=1,
        error_type="RuntimeError",
        error="could not connect: password=[redacted] refused",
        replica="replica-1",
    )
    assert event.schedule == "acme/acme.nightly"


@pytest.mark.django_db(transaction=True)
def test_team_owner_is_mailed_at_the_address_team_emails_gives(
    worker, clock, on_dead_example
) -> None:
    dead_schedule(record_owner="team-billing")
    clock.set(T0)
    with override_settings(TEAM_EMAILS={"team-billing": "billing-team@example.com"}):
        worker.run_pass()
    assert [m.to for m in mail.outbox] == [["billing-team@example.com"]]


# --- the other signals, each once for its event ----------------------------------------------


pytestmark_db = pytest.mark.django_db


@pytestmark_db
def test_completed_is_sent_once_per_completion(
    worker, clock, received, django_capture_on_commit_callbacks
) -> None:
    schedule = ScheduleFactory.create(job="tests.fine")
    plan(schedule, T0, T0 + timedelta(minutes=1), now=T0)
    events = received(signals.occurrence_completed)
    clock.set(T0 + timedelta(minutes=1))
    with django_capture_on_commit_callbacks(execute=True):
        worker.run_pass()
        assert events == []  # not before the test's transaction would commit
    assert sorted(e.scheduled_at for e in events) == [T0, T0 + timedelta(minutes=1)]
    assert {e.attempt for e in events} == {1}


@pytestmark_db
def test_failed_is_sent_with_when_the_retry_is_due(
    worker, clock, received, django_capture_on_commit_callbacks
) -> None:
    events = received(signals.occurrence_failed)
    dead = received(signals.occurrence_dead)
    plan(ScheduleFactory.create(job="tests.broken", max_attempts=3), T0, now=T0)
    clock.set(T0)
    with django_capture_on_commit_callbacks(execute=True):
        worker.run_pass()
    (event,) = events
    assert event.retry_at == Occurrence.objects.get().due_at
    assert event.error == "could not connect: password=[redacted] refused"
    assert dead == []


@pytestmark_db
def test_overlap_skip_of_a_claim_is_sent_as_skipped(
    worker, clock, received, django_capture_on_commit_callbacks
) -> None:
    schedule = ScheduleFactory.create(job="tests.fine", overlap="skip")
    plan(schedule, T0, now=T0)
    claim("elsewhere", T0, lease_for=timedelta(hours=1))  # T0 runs on another replica
    plan(schedule, T0 + timedelta(minutes=1), now=T0)
    events = received(signals.occurrence_skipped)
    clock.set(T0 + timedelta(minutes=1))
    with django_capture_on_commit_callbacks(execute=True):
        worker.run_pass()
        worker.run_pass()
    (event,) = events
    assert (event.scheduled_at, event.reason, event.attempt) == (
        T0 + timedelta(minutes=1),
        "overlap",
        0,
    )


@pytestmark_db
def test_misfire_skips_of_the_planner_are_sent_once_each(
    worker, clock, received, django_capture_on_commit_callbacks
) -> None:
    hour = timedelta(hours=1)
    schedule = ScheduleFactory.create(
        job="tests.fine",
        interval=hour,
        misfire="skip",
        max_delay=timedelta(minutes=5),
        next_due_at=T0,
    )
    plan_due(now=T0)  # T0 planned; then no replica runs for three hours
    events = received(signals.occurrence_skipped)
    clock.set(T0 + 3 * hour)
    with django_capture_on_commit_callbacks(execute=True):
        worker.run_pass()
        worker.run_pass()
    # T0 was planned and missed (marked skipped), T0+1h and T0+2h are planned skipped.
    assert sorted((e.scheduled_at, e.reason, e.key) for e in events) == [
        (T0 + n * hour, "misfire", schedule.key) for n in range(3)
    ]
    skipped = Occurrence.objects.filter(state=OccurrenceState.SKIPPED)
    assert {o.pk for o in skipped} == {e.occurrence_id for e in events}


@pytestmark_db
def test_takeover_of_a_lapsed_lease_is_sent_as_lease_lost_naming_who_lost_it(
    worker, clock, received, django_capture_on_commit_callbacks
) -> None:
    schedule = ScheduleFactory.create(job="tests.fine", max_attempts=3)
    plan(schedule, T0, now=T0)
    claim("crashed-replica", T0)  # started, then its replica died
    lost = received(signals.lease_lost)
    completed = received(signals.occurrence_completed)
    clock.set(T0 + LEASE + timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        worker.run_pass()
    (event,) = lost
    assert (event.reason, event.replica, event.attempt) == ("taken_over", "crashed-replica", 1)
    assert [e.attempt for e in completed] == [2]


@pytestmark_db
def test_a_fenced_out_completion_is_sent_as_lease_lost(
    jobs, worker, clock, received, django_capture_on_commit_callbacks
) -> None:
    def outlived(run: Run) -> None:
        # The lease lapses while it runs and another replica takes the occurrence over.
        clock.advance(LEASE * 2)
        claim("other", clock.now())

    jobs.register("tests.outlived", outlived)
    schedule = ScheduleFactory.create(job="tests.outlived")
    plan(schedule, T0, now=T0)
    lost = received(signals.lease_lost)
    completed = received(signals.occurrence_completed)
    clock.set(T0)
    with django_capture_on_commit_callbacks(execute=True):
        assert list(worker.run_pass().outcomes.elements()) == ["lease_lost"]
    (event,) = lost
    assert (event.reason, event.replica, event.attempt) == ("fenced_out", "replica-1", 1)
    assert completed == []


@pytestmark_db
def test_a_silent_replica_is_declared_gone_once(
    clock, received, django_capture_on_commit_callbacks
) -> None:
    Replica.objects.create(
        id="silent",
        host="h",
        pid=1,
        started_at=T0,
        heartbeat_at=T0,
        state=ReplicaState.RUNNING,
    )
    events = received(signals.replica_gone)
    clock.set(T0 + timedelta(minutes=5))

    with django_capture_on_commit_callbacks(execute=True):
        heartbeat("a", clock).beat(ReplicaState.RUNNING)
        heartbeat("b", clock).beat(ReplicaState.RUNNING)  # a second replica notices: nothing more
    assert events == [
        ReplicaEvent(
            replica_id="silent",
            host="h",
            pid=1,
            heartbeat_at=T0,
            declared_at=T0 + timedelta(minutes=5),
            declared_by="a",
        )
    ]
    assert Replica.objects.get(id="silent").state == ReplicaState.GONE
    assert Replica.objects.get(id="b").state == ReplicaState.RUNNING  # recent: not gone


@pytest.fixture
def no_task_relay() -> Iterator[None]:
    """The suite's settings name JobsBackend, whose ``task_finished`` relay is a receiver of
    the occurrence signals (``task_results.connect_finished``): off for this test."""
    from django_jobs.task_results import connect_finished

    ends = (signals.occurrence_completed, signals.occurrence_dead, signals.occurrence_skipped)
    for signal in ends:
        signal.disconnect(dispatch_uid="django_jobs.tasks.task_finished")
    yield
    connect_finished()


@pytestmark_db
@pytest.mark.usefixtures("no_task_relay")
def test_without_receivers_nothing_is_built_or_declared(
    worker, clock, django_capture_on_commit_callbacks
) -> None:
    schedule = ScheduleFactory.create(job="tests.fine")
    plan(schedule, T0, now=T0)
    Replica.objects.create(
        id="silent", host="h", pid=1, started_at=T0, heartbeat_at=T0, state="running"
    )
    clock.set(T0 + timedelta(minutes=5))
    with django_capture_on_commit_callbacks() as callbacks:
        worker.run_pass()
        heartbeat("a", clock).beat(ReplicaState.RUNNING)
    assert callbacks == []
    assert Replica.objects.get(id="silent").state == ReplicaState.RUNNING


@pytestmark_db
def test_a_raising_receiver_is_logged_and_the_worker_goes_on(
    worker, clock, received, django_capture_on_commit_callbacks
) -> None:
    def broken_receiver(sender: type, **kwargs: Any) -> None:
        raise ValueError("the receiver broke")

    signals.occurrence_completed.connect(broken_receiver, weak=False)
    after = received(signals.occurrence_completed)  # connected after the broken one
    try:
        schedule = ScheduleFactory.create(job="tests.fine")
        plan(schedule, T0, T0 + timedelta(minutes=1), now=T0)
        clock.set(T0 + timedelta(minutes=1))
        with capture_logs() as logs, django_capture_on_commit_callbacks(execute=True):
            summary = worker.run_pass()
    finally:
        signals.occurrence_completed.disconnect(broken_receiver)
    assert summary.outcomes["completed"] == 2
    assert len(after) == 2  # the next receiver still got every event
    failures = [e for e in logs if e["event"] == "signal.receiver_failed"]
    assert len(failures) == 2
    assert failures[0]["signal"] == "occurrence_completed"
    assert failures[0]["error_type"] == "ValueError"


# --- ON_DEAD ---------------------------------------------------------------------------------

called: list[OccurrenceEvent] = []


def record_dead(event: OccurrenceEvent) -> None:
    called.append(event)


@pytestmark_db
def test_on_dead_setting_is_called_for_each_dead_occurrence(
    worker, clock, django_capture_on_commit_callbacks
) -> None:
    called.clear()
    dead_schedule()
    with override_settings(
        DJANGO_JOBS={**get_settings_dict(), "ON_DEAD": "tests.test_alerts.record_dead"}
    ):
        assert signals.connect_on_dead()
        try:
            clock.set(T0)
            with django_capture_on_commit_callbacks(execute=True):
                worker.run_pass()
        finally:
            signals.occurrence_dead.disconnect(sender=Occurrence, dispatch_uid=signals.ON_DEAD_UID)
    assert [(e.key, e.error_type) for e in called] == [("acme.nightly", "RuntimeError")]


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("tests.test_alerts.no_such_hook", "cannot be imported"),
        ("tests.no_such_module.hook", "cannot be imported"),
        ("tests.test_alerts.SECRET", "is not callable"),
    ],
)
def test_a_bad_on_dead_path_is_refused_naming_the_setting(path: str, says: str) -> None:
    with override_settings(DJANGO_JOBS={"ON_DEAD": path}):
        (error,) = check_settings()
        assert error.id == "django_jobs.E004"
        assert error.msg.startswith(f"DJANGO_JOBS['ON_DEAD']: {path!r}")
        assert says in error.msg
        with pytest.raises(Exception, match=r"DJANGO_JOBS\['ON_DEAD'\]"):
            signals.connect_on_dead()


def test_an_on_dead_that_is_not_a_dotted_path_is_refused() -> None:
    with override_settings(DJANGO_JOBS={"ON_DEAD": "not a path"}):
        (error,) = check_settings()
    assert error.id == "django_jobs.E003"
    assert "DJANGO_JOBS['ON_DEAD'] must be the dotted path of a callable" in error.msg
