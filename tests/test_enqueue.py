"""``enqueue()``: one-off work from application code, in the caller's transaction (issue #18).

In-process tests run the worker inline on the test's clock; the process tests at the end run
real ``runworker`` processes and enqueue from a view and from two processes at once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.db import transaction
from django.test import Client

from django_jobs import JobsError, Retry, enqueue
from django_jobs.clock import use_clock
from django_jobs.exceptions import UnknownJob
from django_jobs.identity import enqueued_id
from django_jobs.models import (
    Attempt,
    Limit,
    Occurrence,
    OccurrenceState,
    Origin,
    Schedule,
    Trigger,
)
from django_jobs.registry import JobPolicies, registry
from django_jobs.services.enqueue import policy_key
from django_jobs.testing import FakeClock, run_due
from tests.workerapp.models import Effect

from .concurrency import wait_until
from .processes import ROOT, database_url
from .storeutil import claim_one_at_a_time

pytestmark = pytest.mark.django_db


@pytest.fixture
def ran(registered) -> list[tuple[str, dict]]:
    """Runs of job ``t.send`` (identity, arguments), in order; it returns its arguments."""
    seen: list[tuple[str, dict]] = []

    def send(run):
        seen.append((run.occurrence_key, run.args))
        return {"sent": run.args}

    registered(
        "t.send",
        send,
        policies=registry_policies(retention=timedelta(days=2), max_attempts=4, priority=3),
    )
    return seen


def registry_policies(*, retention, max_attempts, priority):
    return JobPolicies(
        retry=Retry(max_attempts=max_attempts, backoff=timedelta(0)),
        timeout=timedelta(minutes=2),
        retention=retention,
        priority=priority,
        owner="team-billing",
    )


def test_enqueued_work_runs_once_with_its_arguments_and_keeps_its_result(clock, ran) -> None:
    with use_clock(clock):
        done = enqueue("t.send", args={"order": 7})
        assert done.created
        run_due(clock)
        run_due(clock)

    assert ran == [(str(done.id), {"order": 7})]
    occurrence = Occurrence.objects.get(pk=done.id)
    assert occurrence.state == OccurrenceState.COMPLETED
    assert occurrence.trigger == Trigger.ENQUEUED
    assert occurrence.result == {"sent": {"order": 7}}
    assert occurrence.priority == 3  # the job's, from @job(priority=3)


def test_the_first_enqueue_records_the_jobs_policies_once_per_tenant(clock, ran) -> None:
    with use_clock(clock):
        enqueue("t.send")
        enqueue("t.send")
        enqueue("t.send", tenant="acme")

    records = Schedule.objects.filter(key=policy_key("t.send"))
    assert sorted(records.values_list("tenant", flat=True)) == ["", "acme"]
    record = records.get(tenant="")
    assert record.origin == Origin.ENQUEUE
    assert record.next_due_at is None  # never planned
    assert (record.max_attempts, record.backoff, record.timeout) == (
        4,
        timedelta(0),
        timedelta(minutes=2),
    )
    assert (record.operating_owner, record.record_owner, record.priority) == (
        "team-billing",
        "team-billing",
        3,
    )
    assert Limit.objects.get(schedule=record).keep_for == timedelta(days=2)
    assert Occurrence.objects.filter(schedule__key=policy_key("t.send")).count() == 3


def test_a_rolled_back_enqueue_leaves_nothing_to_run(clock, ran) -> None:
    with use_clock(clock):
        with pytest.raises(RuntimeError), transaction.atomic():  # noqa: PT012
            enqueue("t.send", args={"order": 1})
            raise RuntimeError("the caller failed")
        run_due(clock)

    assert ran == []
    assert not Occurrence.objects.exists()
    assert not Schedule.objects.filter(key=policy_key("t.send")).exists()


def test_the_same_key_twice_is_one_occurrence(clock, ran) -> None:
    with use_clock(clock):
        first = enqueue("t.send", key="invoice-42", args={"n": 1})
        again = enqueue("t.send", key="invoice-42", args={"n": 2})
        run_due(clock)
        later = enqueue("t.send", key="invoice-42", args={"n": 3})  # after it ran
        run_due(clock)

    assert first.id == again.id == later.id == enqueued_id("", "t.send", "invoice-42")
    assert (first.created, again.created, later.created) == (True, False, False)
    assert ran == [(str(first.id), {"n": 1})]


def test_a_key_names_the_same_work_in_one_tenant_and_job_only(clock, ran) -> None:
    with use_clock(clock):
        ids = {
            enqueue("t.send", key="k").id,
            enqueue("t.send", key="k", tenant="acme").id,
            enqueue("t.send", key="other").id,
        }
    assert len(ids) == 3


def test_without_a_key_every_call_is_new_work(clock, ran) -> None:
    with use_clock(clock):
        for _ in range(3):
            enqueue("t.send", args={"same": True})
        run_due(clock)
    assert len(ran) == 3


def test_at_and_after_delay_the_run(clock, ran) -> None:
    with use_clock(clock):
        enqueue("t.send", args={"w": "at"}, at=clock.now() + timedelta(minutes=10))
        enqueue("t.send", args={"w": "after"}, after=timedelta(minutes=5))
        run_due(clock)
        assert ran == []
        clock.advance(timedelta(minutes=5))
        run_due(clock)
        assert [args for _, args in ran] == [{"w": "after"}]
        clock.advance(timedelta(minutes=5))
        run_due(clock)
    assert [args for _, args in ran] == [{"w": "after"}, {"w": "at"}]


def test_a_failing_enqueued_job_is_retried_then_dead(clock, registered) -> None:
    def fail(run):
        raise ValueError(f"partner refused attempt {run.attempt}")

    registered("t.fail", fail, policies=registry_policies(retention=10, max_attempts=2, priority=0))
    with use_clock(clock):
        done = enqueue("t.fail")
        run_due(clock)
        run_due(clock)
    occurrence = Occurrence.objects.get(pk=done.id)
    assert occurrence.state == OccurrenceState.DEAD
    assert occurrence.attempts == 2
    assert "partner refused attempt 2" in occurrence.last_error_message
    assert occurrence.result is None


def test_a_result_json_cannot_hold_fails_the_attempt_naming_the_job(clock, registered) -> None:
    registered(
        "t.bad_result",
        lambda run: {"when": datetime.now(UTC)},
        policies=registry_policies(retention=10, max_attempts=1, priority=0),
    )
    with use_clock(clock):
        done = enqueue("t.bad_result")
        run_due(clock)
    occurrence = Occurrence.objects.get(pk=done.id)
    assert occurrence.state == OccurrenceState.DEAD
    assert occurrence.last_error_type == "django_jobs.exceptions.JobsError"
    assert "job 't.bad_result' returned a value that cannot be kept" in (
        occurrence.last_error_message
    )
    assert "result['when']" in occurrence.last_error_message


def test_higher_priority_is_claimed_first_then_oldest_due(clock, ran) -> None:
    """Each enqueued a millisecond after the one before: work due at the very same instant
    with the same priority has no order (the claim's tie is the index's, not the enqueue's:
    a CI run claimed 3 before 1 when both were due at one instant)."""
    with use_clock(clock):
        for p, n in ((0, 1), (5, 2), (0, 3), (-5, 4)):
            enqueue("t.send", args={"p": p, "n": n}, priority=p)
            clock.advance(timedelta(milliseconds=1))
        clock.advance(timedelta(seconds=1))
        enqueue("t.send", args={"p": 5, "n": 5}, priority=5)
        clock.advance(timedelta(seconds=1))
        claim_one_at_a_time(clock, 5)
    assert [args["n"] for _, args in ran] == [2, 5, 1, 3, 4]


def test_low_priority_goes_before_higher_priority_that_came_due_later_than_the_gap(
    clock, ran
) -> None:
    """The starvation bound: a point of priority is worth a minute of waiting."""
    with use_clock(clock):
        enqueue("t.send", args={"n": "low"}, priority=0)
        clock.advance(timedelta(minutes=11))
        enqueue("t.send", args={"n": "high, 11 minutes later"}, priority=10)
        enqueue("t.send", args={"n": "highest"}, priority=12)
        claim_one_at_a_time(clock, 3)
    assert [args["n"] for _, args in ran] == ["highest", "low", "high, 11 minutes later"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"args": {"when": object()}}, "enqueue of job 't.send': args: args['when']: must be JSON"),
        ({"args": [1]}, "enqueue of job 't.send': args: must be a JSON object"),
        ({"priority": 101}, "enqueue of job 't.send': priority: must be from -100 to 100"),
        ({"priority": True}, "enqueue of job 't.send': priority: must be an int"),
        ({"tenant": "a b"}, "enqueue of job 't.send': tenant:"),
        ({"key": ""}, "enqueue of job 't.send': key: 1-200 printable characters"),
        ({"key": "k\n"}, "enqueue of job 't.send': key:"),
        ({"at": datetime(2026, 3, 1)}, "enqueue of job 't.send': at: must be an aware"),  # noqa: DTZ001
        ({"after": timedelta(seconds=-1)}, "enqueue of job 't.send': after: a timedelta of 0"),
        (
            {"at": datetime(2026, 3, 1, tzinfo=UTC), "after": timedelta(0)},
            "enqueue of job 't.send': give at or after, not both",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_job_and_the_field(clock, ran, kwargs, message) -> None:
    with use_clock(clock), pytest.raises(JobsError) as refused:
        enqueue("t.send", **kwargs)
    assert str(refused.value).startswith(message)
    assert not Occurrence.objects.exists()


def test_an_unregistered_job_is_refused(clock) -> None:
    with use_clock(clock), pytest.raises(UnknownJob, match="no handler is registered for job"):
        enqueue("t.nobody")

    def stray(run):
        return None

    with use_clock(clock), pytest.raises(JobsError, match="stray is not a registered job"):
        enqueue(stray)


def test_the_job_function_itself_names_the_job(clock, ran) -> None:
    handler = registry.get("t.send").func
    with use_clock(clock):
        done = enqueue(handler, args={"by": "function"})
    assert done.job == "t.send"
    assert Occurrence.objects.get(pk=done.id).args == {"by": "function"}


def test_bad_job_policies_are_refused_at_registration(registered) -> None:
    from django_jobs.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"job 't\.x': priority: must be from -100"):
        registered("t.x", lambda run: None, policies=JobPolicies(priority=500))
    with pytest.raises(ConfigurationError, match=r"job 't\.y': timeout: must be a positive"):
        registered("t.y", lambda run: None, policies=JobPolicies(timeout=timedelta(0)))


# --- Real processes ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.processes
def test_a_view_raising_after_enqueue_runs_nothing_one_committing_runs_once_woken_by_notify(
    start,
) -> None:
    # Polling every 300 s: a run within a minute of the commit was woken by the NOTIFY (the
    # minute is for two loaded cores; unloaded it takes well under a second).
    replica = start("r1", env={"JOBS_POLL_SECONDS": "300"})
    replica.wait_logged("worker.started")
    client = Client(raise_request_exception=False)

    failed = client.get("/enqueue-order/", {"order": 1, "fail": 1})
    assert failed.status_code == 500
    committed_at = datetime.now(UTC)
    response = client.get("/enqueue-order/", {"order": 2})
    assert response.status_code == 200
    # The handler completes inside run.atomic(); its result is written by the statement after
    # (docs/enqueue.md): wait for both.
    wait_until(
        lambda: Occurrence.objects.filter(
            state=OccurrenceState.COMPLETED, result__isnull=False
        ).exists(),
        timeout=60,
        what="the committed enqueue to run, woken by its NOTIFY, and its result",
    )
    occurrence = Occurrence.objects.get()  # the failed view's never existed
    assert str(occurrence.pk) == response.content.decode()
    assert occurrence.args == {"order": 2}
    assert occurrence.result == {"args": {"order": 2}, "attempt": 1}
    assert occurrence.started_at is not None
    assert occurrence.started_at - committed_at < timedelta(seconds=60)
    assert list(Effect.objects.values_list("occurrence_key", flat=True)) == [str(occurrence.pk)]


ENQUEUE_AND_HOLD = """
import sys, time
from pathlib import Path
from django.db import transaction
from django_jobs import enqueue
signals = Path(sys.argv[1]); me = sys.argv[2]
with transaction.atomic():
    done = enqueue("proc.enqueued", key="order-9", args={"by": me})
    (signals / f"enqueued-{me}").touch()
    deadline = time.monotonic() + 60  # the test says when to commit; never forever
    while not (signals / f"commit-{me}").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
print("created" if done.created else "existing", done.id)
"""


@pytest.mark.django_db(transaction=True)
@pytest.mark.processes
def test_two_processes_enqueuing_one_key_concurrently_make_one_occurrence_and_one_run(
    start, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
        "DATABASE_URL": database_url(),
    }

    def enqueuer(name: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-W", "ignore", "-c", _script(), str(tmp_path), name],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    a = enqueuer("a")
    wait_until(lambda: (tmp_path / "enqueued-a").exists(), timeout=60, what="a to enqueue")
    b = enqueuer("b")  # its insert waits for a's transaction: the same identity
    wait_until(
        lambda: _waiting_on_a_lock() >= 1, timeout=60, what="b to wait on a's uncommitted row"
    )
    (tmp_path / "commit-a").touch()
    (tmp_path / "commit-b").touch()
    out_a, err_a = a.communicate(timeout=60)
    out_b, err_b = b.communicate(timeout=60)
    assert a.returncode == 0, err_a
    assert b.returncode == 0, err_b
    assert out_a.split()[0] == "created"
    assert out_b.split()[0] == "existing"
    assert out_a.split()[1] == out_b.split()[1]

    replica = start("r1")
    replica.wait_logged("worker.started")
    wait_until(
        lambda: Occurrence.objects.filter(state=OccurrenceState.COMPLETED).exists(),
        timeout=30,
        what="the one occurrence to run",
    )
    occurrence = Occurrence.objects.get()
    assert occurrence.args == {"by": "a"}
    assert Counter(Effect.objects.values_list("occurrence_key", flat=True)) == {
        str(occurrence.pk): 1
    }
    assert Attempt.objects.filter(occurrence=occurrence).count() == 1


def _script() -> str:
    return "import django; django.setup()\n" + ENQUEUE_AND_HOLD


def _waiting_on_a_lock() -> int:
    from .concurrency import backends_waiting_on_locks

    return backends_waiting_on_locks()


def test_fake_clock_is_what_enqueue_reads(ran) -> None:
    fake = FakeClock(datetime(2031, 5, 1, 8, 0, tzinfo=UTC))
    with use_clock(fake):
        done = enqueue("t.send")
    assert Occurrence.objects.get(pk=done.id).scheduled_at == fake.now()


def test_sync_sets_policy_records_to_the_jobs_policies_of_the_release(clock, ran) -> None:
    from django_jobs import services
    from django_jobs.models import AuditRecord

    with use_clock(clock):
        enqueue("t.send", tenant="acme")
    handler = registry.get("t.send")
    release = JobPolicies(retry=Retry(max_attempts=9), retention=50, priority=-2, owner="ops")
    registry.unregister("t.send")
    registry.register("t.send", handler.func, policies=release)

    report = services.sync_schedules([], now=clock.now())

    record = Schedule.objects.get(tenant="acme", key=policy_key("t.send"))
    assert (record.max_attempts, record.priority, record.record_owner) == (9, -2, "ops")
    assert (Limit.objects.get(schedule=record).keep_last, record.limit.keep_for) == (50, None)
    assert "acme/@t.send" in report.updated
    audit = AuditRecord.objects.get(action="schedule.policies_changed")
    assert (audit.before["max_attempts"], audit.after["max_attempts"]) == (4, 9)
    assert services.sync_schedules([], now=clock.now()).updated == []  # aligned: no change


def test_enqueued_work_that_cannot_start_within_its_max_delay_is_skipped(clock, registered) -> None:
    ran: list[str] = []
    registered(
        "t.fresh_only",
        lambda run: ran.append(run.args["n"]),
        policies=JobPolicies(max_delay=timedelta(minutes=5)),
    )
    with use_clock(clock):
        stale = enqueue("t.fresh_only", args={"n": "stale"})
        clock.advance(timedelta(minutes=4))
        fresh = enqueue("t.fresh_only", args={"n": "fresh"})
        clock.advance(timedelta(minutes=2))  # stale: 6 minutes late; fresh: 2
        run_due(clock)
    assert ran == ["fresh"]
    skipped = Occurrence.objects.get(pk=stale.id)
    assert (skipped.state, skipped.skip_reason, skipped.attempts) == ("skipped", "misfire", 0)
    assert Occurrence.objects.get(pk=fresh.id).state == OccurrenceState.COMPLETED


def test_without_a_max_delay_enqueued_work_waits_as_long_as_it_takes(clock, ran) -> None:
    with use_clock(clock):
        enqueue("t.send", args={"n": 1})
        clock.advance(timedelta(days=400))
        run_due(clock)
    assert [args for _, args in ran] == [{"n": 1}]


def test_operators_find_a_jobs_policy_record_by_its_key(clock, ran, django_user_model) -> None:
    from io import StringIO

    from django.core.management import call_command

    django_user_model.objects.create_superuser("ops", "ops@example.com", "pw")
    with use_clock(clock):
        done = enqueue("t.send", args={"n": 1})
        run_due(clock)
    out = StringIO()
    call_command(
        "jobs", "inspect", "@t.send", "--actor", "ops", "--occurrence", str(done.id), stdout=out
    )
    assert "state: completed" in out.getvalue()
    assert 'result: {"sent": {"n": 1}}' in out.getvalue()
    out = StringIO()
    call_command(
        "jobs", "disable", "@t.send", "--actor", "ops", "--reason", "partner down", stdout=out
    )
    with use_clock(clock):
        enqueue("t.send", args={"n": 2})
        run_due(clock)
    assert [args for _, args in ran] == [{"n": 1}]  # claims of a disabled record stop


def test_a_declared_schedules_priority_is_synced_and_copied_to_its_occurrences(clock) -> None:
    from django_jobs import InvalidSchedule, services

    from .factories import declaration

    def declared(priority: int):
        return declaration("t.ranked", job="t.send", retention=10, priority=priority)

    services.sync_schedules([declared(7)], now=clock.now())
    record = Schedule.objects.get(key="t.ranked")
    assert record.priority == 7
    from .storeutil import plan

    (planned,) = plan(record, clock.now(), now=clock.now())
    assert Occurrence.objects.get(pk=planned).priority == 7
    services.sync_schedules([declared(-3)], now=clock.now())
    assert Schedule.objects.get(key="t.ranked").priority == -3
    with pytest.raises(InvalidSchedule, match="priority: must be from -100 to 100, got 101"):
        declared(101)


def test_a_policy_record_passes_the_record_checks_and_shows_in_inspect_and_the_admin(
    clock, ran, django_user_model, client
) -> None:
    from io import StringIO

    from django.core.checks import run_checks
    from django.core.management import call_command

    with use_clock(clock):
        enqueue("t.send", tenant="acme")
    found = [m for m in run_checks(databases=["default"]) if "@t.send" in m.msg]
    assert found == []  # owners, a Limit (E016), runbooks (E017), a valid record
    root = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    out = StringIO()
    call_command("jobs", "inspect", "@t.send", "--tenant", "acme", "--actor", "root", stdout=out)
    assert "job: t.send" in out.getvalue()
    client.force_login(root)
    record = Schedule.objects.get(key="@t.send")
    assert client.get("/admin/django_jobs/schedule/").status_code == 200
    page = client.get(f"/admin/django_jobs/schedule/{record.pk}/change/")
    assert page.status_code == 200
    assert "@t.send" in page.content.decode()


def test_the_kill_switch_pauses_a_jobs_enqueued_work_by_its_policy_key(
    clock, ran, settings
) -> None:
    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "PAUSED_SCHEDULES": ["@t.send"]}
    with use_clock(clock):
        enqueue("t.send", args={"n": 1})
        run_due(clock)
        assert ran == []
        settings.DJANGO_JOBS = {
            k: v for k, v in settings.DJANGO_JOBS.items() if k != "PAUSED_SCHEDULES"
        }
        run_due(clock)
    assert [args for _, args in ran] == [{"n": 1}]
