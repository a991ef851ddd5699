"""A team's own project, its first job (issue #35): record defaults, handlers that take plain
arguments, a bare ``@job``, "did you mean", and where a project's logs go.

Each test here fails on 8f518d8, the release the new user tried.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core import checks
from django.test import override_settings

from django_jobs import enqueue, every, job, schedule, services
from django_jobs.conf import get_settings
from django_jobs.declarations import InvalidSchedule
from django_jobs.exceptions import ConfigurationError, JobsError, UnknownJob
from django_jobs.models import Occurrence, Schedule
from django_jobs.registry import Registry, registry
from django_jobs.testing import FakeClock, run_due, use_clock

from .factories import RECORD_DEFAULTS
from .processes import ROOT, database_url

DEFAULTS = RECORD_DEFAULTS
JAN_1 = datetime(2026, 1, 1, tzinfo=UTC)


# --- record defaults ------------------------------------------------------------------------


def test_the_minimal_declaration_is_refused_naming_every_field_no_default_gives() -> None:
    with pytest.raises(InvalidSchedule) as refused:
        schedule("orders.sync", job="orders.sync", timing=every(minutes=5), register=False)
    assert refused.value.field == "operating_owner, record_owner, status, retention"
    assert str(refused.value) == (
        "schedule 'orders.sync': operating_owner, record_owner, status, retention: not given, "
        "and DJANGO_JOBS['DEFAULTS'] gives no default for them: pass operating_owner=, "
        "record_owner=, status=, retention= to schedule(...) or set them in "
        "DJANGO_JOBS['DEFAULTS'] (docs/schedules.md, Record defaults)"
    )


@override_settings(DJANGO_JOBS={"DEFAULTS": {"operating_owner": "orders-team"}})
def test_a_default_fills_only_its_field_and_the_rest_are_still_named() -> None:
    with pytest.raises(InvalidSchedule) as refused:
        schedule("orders.sync", job="orders.sync", timing=every(minutes=5), register=False)
    assert refused.value.field == "record_owner, status, retention"


@pytest.mark.django_db
@override_settings(DJANGO_JOBS={"DEFAULTS": DEFAULTS})
def test_the_minimal_declaration_with_defaults_is_a_whole_stored_record() -> None:
    declared = schedule("orders.sync", job="orders.sync", timing=every(minutes=5), register=False)
    own = schedule(
        "orders.own",
        job="orders.sync",
        timing=every(minutes=5),
        operating_owner="night-shift",
        register=False,
    )
    assert declared.problems() == []
    services.sync_schedules([declared, own], now=JAN_1)
    row = Schedule.objects.get(key="orders.sync")
    assert (row.operating_owner, row.record_owner, row.status) == (
        "orders-team",
        "orders-lead",
        "active",
    )
    assert row.limit.keep_for == timedelta(days=30)
    assert row.interval == timedelta(minutes=5)
    # The built-in defaults still complete the policies the project did not set.
    assert (row.max_delay, row.misfire, row.overlap, row.max_attempts) == (
        timedelta(minutes=5),
        "skip",
        "skip",
        3,
    )
    assert Schedule.objects.get(key="orders.own").operating_owner == "night-shift"


@pytest.mark.parametrize(
    ("defaults", "says"),
    [
        (
            {"retension": timedelta(days=3)},
            "DJANGO_JOBS['DEFAULTS']['retension']: is not a field a default may give (did you "
            "mean 'retention'?)",
        ),
        (
            {"status": "live"},
            "DJANGO_JOBS['DEFAULTS']['status']: must be one of draft, active, retired, got 'live'",
        ),
        (
            {"timing": every(timedelta(minutes=1))},
            "DJANGO_JOBS['DEFAULTS']['timing']: is not a field",
        ),
        ({"retry": 3}, "DJANGO_JOBS['DEFAULTS']['retry']: must be Retry(...), got 3"),
    ],
)
def test_bad_defaults_are_check_e003_naming_the_field(defaults: dict[str, Any], says: str) -> None:
    with override_settings(DJANGO_JOBS={"DEFAULTS": defaults}):
        with pytest.raises(ConfigurationError) as refused:
            get_settings()
        errors = [m for m in checks.run_checks() if m.id == "django_jobs.E003"]
    assert str(refused.value).startswith(says)
    assert [e.msg for e in errors] == [str(refused.value)]


@override_settings(DJANGO_JOBS={"DEFAULTS": {**DEFAULTS, "timeout": timedelta(minutes=2)}})
def test_job_policies_take_the_same_defaults() -> None:
    try:

        @job("tests.first.defaults")
        def handler(run: Any) -> None:
            return None

        policies = registry.get("tests.first.defaults").policies
    finally:
        registry.unregister("tests.first.defaults")
    assert policies.timeout == timedelta(minutes=2)
    assert policies.retention == timedelta(days=30)
    assert policies.owner == "orders-team"


# --- errors where they belong ---------------------------------------------------------------


def test_a_bare_job_decorator_is_an_error_not_a_silent_nothing() -> None:
    def send_confirmation(run: Any) -> None:
        return None

    with pytest.raises(ConfigurationError) as refused:
        job(send_confirmation)  # type: ignore[arg-type]  # what `@job` above a def does
    assert 'names no job: write @job("<app>.<job>")' in str(refused.value)
    assert "send_confirmation" in str(refused.value)


def test_an_unknown_job_and_an_unknown_setting_say_what_was_meant() -> None:
    jobs = Registry()
    jobs.register("orders.sync", lambda run: None)
    with pytest.raises(UnknownJob, match=r"'orders\.snyc' \(did you mean 'orders\.sync'\?\)"):
        jobs.get("orders.snyc")
    meant = r"LEASE_SECOND \(did you mean 'LEASE_SECONDS'"
    with (
        override_settings(DJANGO_JOBS={"LEASE_SECOND": 30}),
        pytest.raises(ConfigurationError, match=meant),
    ):
        get_settings()


# --- handlers with plain arguments ----------------------------------------------------------


@pytest.fixture
def confirmations() -> Any:
    """``orders.send_confirmation`` registered Celery-style, ``def send(order_id)``."""
    sent: list[object] = []

    def send_confirmation(order_id: int, note: str = "") -> None:
        sent.append((order_id, note))

    registry.register("orders.send_confirmation", send_confirmation)
    yield sent
    registry.unregister("orders.send_confirmation")


@pytest.mark.django_db(transaction=True)
def test_a_handler_of_plain_arguments_gets_them_by_name(confirmations: list[object]) -> None:
    clock = FakeClock(datetime.now(UTC))
    with use_clock(clock):
        enqueue("orders.send_confirmation", args={"order_id": 42})
        run_due(clock)
    assert confirmations == [(42, "")]
    (done,) = Occurrence.objects.filter(schedule__job="orders.send_confirmation")
    assert done.state == "completed"


@pytest.mark.django_db(transaction=True)
def test_a_handler_of_its_run_and_keyword_arguments_gets_both() -> None:
    seen: list[object] = []

    def send(run: Any, *, order_id: int) -> None:
        seen.append((run.args, order_id))

    registry.register("orders.send_keywords", send)
    try:
        clock = FakeClock(datetime.now(UTC))
        with use_clock(clock):
            enqueue("orders.send_keywords", args={"order_id": 7, "extra": 1})
            run_due(clock)
    finally:
        registry.unregister("orders.send_keywords")
    assert seen == [({"order_id": 7, "extra": 1}, 7)]


@pytest.mark.django_db
def test_enqueue_refuses_arguments_the_handler_cannot_take(confirmations: list[object]) -> None:
    with pytest.raises(JobsError) as missing:
        enqueue("orders.send_confirmation", args={"order": 42})
    assert str(missing.value) == (
        "enqueue of job 'orders.send_confirmation': args: handler "
        "confirmations.<locals>.send_confirmation(order_id, note=''): parameter 'order_id' "
        "has no argument (the arguments given: order); if 'order_id' is meant to receive the "
        "run, name it `run` or annotate it `Run`"
    )
    with pytest.raises(JobsError, match="argument 'urgent' matches no parameter"):
        enqueue("orders.send_confirmation", args={"order_id": 42, "urgent": True})
    assert not Occurrence.objects.filter(schedule__job="orders.send_confirmation").exists()


@override_settings(DJANGO_JOBS={"DEFAULTS": DEFAULTS})
def test_a_schedule_whose_arguments_do_not_fit_its_handler_is_refused(
    confirmations: list[object],
) -> None:
    with pytest.raises(InvalidSchedule) as refused:
        schedule(
            "orders.resend",
            job="orders.send_confirmation",
            timing=every(hours=1),
            args={"id": 1},
            register=False,
        )
    assert refused.value.field == "args"
    assert "parameter 'order_id' has no argument (the arguments given: id)" in str(refused.value)


def _positional(run: Any, order_id: int, /) -> None:
    return None


@pytest.mark.parametrize(("func", "param"), [(_positional, "order_id")])
def test_a_handler_that_cannot_take_arguments_by_name_is_refused_when_registered(
    func: Any, param: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        Registry().register("orders.bad", func)
    assert str(refused.value).startswith(f"job 'orders.bad': handler {func.__name__}(")
    assert f"parameter {param!r} cannot be given by name" in str(refused.value)


# --- logs -----------------------------------------------------------------------------------


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_a_project_without_logging_gets_the_workers_lines_on_stderr_at_info() -> None:
    """``tests.settings`` configures neither structlog nor ``LOGGING``, as a new project."""
    done = subprocess.run(
        [sys.executable, "-m", "django", "runworker", "--once"],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": database_url(),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if " [" in line and "] " in line]
    assert any("[info     ] clock.synced" in line for line in lines), done.stderr[-2000:]
    assert not [line for line in lines if "[debug" in line]
    assert "clock.synced" not in done.stdout  # stdout is the command's own output
    assert "nothing more is due" in done.stdout


# --- what a review of the above found -------------------------------------------------------


def test_an_opaque_wrapper_and_a_run_with_extra_positionals_are_called_with_the_run() -> None:
    from django_jobs.parameters import Parameters

    def unwrapped(*args: Any, **kwargs: Any) -> None:  # a decorator without functools.wraps
        return None

    def extra(run: Any, *rest: Any) -> None:
        return None

    class Handler:
        def __call__(self, job_run: Any) -> None:
            return None

    seen: list[tuple[Any, ...]] = []
    opaque = Parameters.of("j", unwrapped)
    opaque.call(lambda *a, **k: seen.append((a, k)), type("R", (), {"args": {"x": 1}})())
    assert (opaque.takes_run, opaque.names) == (True, frozenset())
    assert seen[0][1] == {}  # no arguments by name: the wrapped handler takes the run alone
    assert Parameters.of("j", extra).problem({"x": 1}) is None
    named = Parameters.of("j", Handler()).problem({})
    assert named is not None
    assert named.split(".<locals>.")[-1] == (
        "Handler(job_run): parameter 'job_run' has no argument (the arguments given: "
        "none); if 'job_run' is meant to receive the run, name it `run` or annotate it `Run`"
    )


def test_an_invalid_setting_leaves_job_registration_to_check_e003() -> None:
    with override_settings(DJANGO_JOBS={"LEASE_SECOND": 30}):
        try:

            @job("tests.first.bad-setting")
            def handler(run: Any) -> None:
                return None

        finally:
            registry.unregister("tests.first.bad-setting")
        assert any(m.id == "django_jobs.E003" for m in checks.run_checks())


@pytest.mark.django_db
def test_an_empty_actor_is_refused_never_replaced_by_the_default() -> None:
    from django.core.management import CommandError, call_command

    with (
        override_settings(DJANGO_JOBS={"CLI_ACTOR": "root"}),
        pytest.raises(CommandError, match="--actor is empty"),
    ):
        call_command("jobs", "list", "--actor", "")


@pytest.mark.django_db
def test_run_now_with_arguments_the_handler_cannot_take_is_refused(root: Any) -> None:
    from .factories import ScheduleFactory

    def send(order_id: int) -> None:
        return None

    registry.register("orders.rerun", send, runtime=True)
    try:
        scheduled = ScheduleFactory.create(job="orders.rerun", args={"order_id": 1})
        with pytest.raises(JobsError, match="parameter 'order_id' has no argument"):
            services.run_now(
                scheduled, actor=root, reason="x", now=datetime.now(UTC), args={"id": 2}
            )
    finally:
        registry.unregister("orders.rerun")
    assert not Occurrence.objects.exists()
