"""Issue #33, finding 1: a grant reaches only the jobs whose code offers them at run time.

Run-time schedules (``upsert_schedule``, the console's form) and run-now's arguments name
only jobs declared ``@job(..., runtime=True)`` or listed in ``DJANGO_JOBS["RUNTIME_JOBS"]``;
the Tasks backend's jobs never. Run-now with arguments needs ``change``, not ``run``.
Schedules declared in code may name any job.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from django_jobs import InvalidSchedule, services
from django_jobs.exceptions import JobsError
from django_jobs.models import AuditRecord, Occurrence, Schedule
from django_jobs.permissions import Forbidden, grant_tenant
from django_jobs.services import sync_schedules
from django_jobs.services.enqueue import enqueue, policy_key
from django_jobs.tasks import job_name
from django_jobs.testing import FakeClock, use_clock

from .console_forms import form_data
from .factories import T0, ScheduleFactory, declaration

pytestmark = pytest.mark.django_db

TASKS_JOB = job_name("default")
# What the attacker's schedule or run-now gave the Tasks backend's job to import and call.
HOSTILE = {"task": "tests.workerapp.import_trap.boom", "backend": "default"}


def staff(name: str, tenant: str, *actions: str) -> User:
    user = User.objects.create_user(name, is_staff=True)
    group = Group.objects.create(name=f"{name}-group")
    user.groups.add(group)
    grant_tenant(group, tenant, *actions)
    return user


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_tenant_change_grant_cannot_schedule_the_tasks_backends_job() -> None:
    operator = staff("mallory", "acme", "view", "change")
    hostile = declaration("acme.hostile", tenant="acme", job=TASKS_JOB, args=HOSTILE)
    with pytest.raises(InvalidSchedule, match=r"job: job 'django_jobs\.tasks:default' runs the"):
        services.upsert_schedule(hostile, actor=operator, reason="x", now=T0)
    assert not Schedule.objects.filter(key="acme.hostile").exists()


def test_the_tasks_backends_job_is_refused_even_when_the_setting_lists_it(settings) -> None:
    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "RUNTIME_JOBS": [TASKS_JOB]}
    root = User.objects.create_superuser("root")
    hostile = declaration("acme.hostile", tenant="acme", job=TASKS_JOB, args=HOSTILE)
    with pytest.raises(InvalidSchedule, match="never offered at run time"):
        services.upsert_schedule(hostile, actor=root, reason="x", now=T0)


def test_a_job_not_offered_at_run_time_is_refused_naming_the_field(settings) -> None:
    operator = staff("mallory", "acme", "view", "change")
    other = declaration("acme.beat", tenant="acme", job="billing.heartbeat")
    with pytest.raises(InvalidSchedule) as refused:
        services.upsert_schedule(other, actor=operator, reason="x", now=T0)
    assert refused.value.field == "job"
    assert "is not offered at run time" in str(refused.value)
    assert 'runtime=True) or DJANGO_JOBS["RUNTIME_JOBS"]' in str(refused.value)

    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "RUNTIME_JOBS": ["billing.heartbeat"]}
    made = services.upsert_schedule(other, actor=operator, reason="x", now=T0)
    assert made.job == "billing.heartbeat"


def test_a_job_declared_runtime_is_offered(registered) -> None:
    registered("tests.offered", lambda run: None, runtime=True)
    operator = staff("alice", "acme", "view", "change")
    made = services.upsert_schedule(
        declaration("acme.offered", tenant="acme", job="tests.offered"),
        actor=operator,
        reason="x",
        now=T0,
    )
    assert made.origin == "runtime"


def test_schedules_declared_in_code_keep_any_job() -> None:
    report = sync_schedules([declaration("billing.beat", job="billing.heartbeat")], now=T0)
    assert report.created == ["billing.beat"]


def test_the_console_form_offers_only_jobs_offered_at_run_time() -> None:
    root = User.objects.create_superuser("root")
    page = logged_in(root).get(reverse("admin:django_jobs_schedule_add")).content.decode()
    assert '<option value="billing.send_statements">' in page
    assert TASKS_JOB not in page
    assert '<option value="billing.heartbeat">' not in page


def test_the_console_form_refuses_the_tasks_job_on_the_job_field() -> None:
    operator = staff("mallory", "acme", "view", "change")
    form = form_data(
        key="acme.hostile",
        job=TASKS_JOB,
        cron="* * * * *",
        args='{"task": "tests.workerapp.import_trap.boom", "backend": "default"}',
        record_owner="ops",
        reason="x",
    )
    with use_clock(FakeClock(T0)):
        response = logged_in(operator).post(reverse("admin:django_jobs_schedule_add"), form)
    assert response.status_code == 200
    field = response.content.decode().split('class="form-row field-job"')[1].split("</div>")[0]
    assert "Select a valid choice" in field
    assert not Schedule.objects.filter(key="acme.hostile").exists()


# --- run-now with arguments ------------------------------------------------------------------


@pytest.fixture
def offered() -> Schedule:
    """A run-time schedule of acme whose job is offered at run time (the example's)."""
    return ScheduleFactory.create(tenant="acme", key="acme.report", job="billing.send_statements")


def test_run_now_with_arguments_needs_change_as_well_as_run(offered: Schedule) -> None:
    runner = staff("ron", "acme", "view", "run")
    with pytest.raises(Forbidden, match="args: ron may not give a run arguments of its own"):
        services.run_now(offered, actor=runner, reason="x", now=T0, args={"customer": "x"})
    assert not Occurrence.objects.exists()
    # Without arguments of its own, run is enough.
    services.run_now(offered, actor=runner, reason="x", now=T0)
    assert Occurrence.objects.get(schedule=offered).args == {}


def test_change_alone_does_not_run_now_with_arguments(offered: Schedule) -> None:
    """Giving arguments adds ``change`` to ``run``; it never replaces it."""
    changer = staff("carol", "acme", "view", "change")
    with pytest.raises(Forbidden, match="carol"):
        services.run_now(offered, actor=changer, reason="x", now=T0, args={"customer": "x"})
    with pytest.raises(Forbidden, match="carol"):
        services.run_now(offered, actor=changer, reason="x", now=T0)
    assert not Occurrence.objects.exists()


def test_run_now_with_arguments_and_change_runs_with_them(offered: Schedule) -> None:
    operator = staff("carol", "acme", "view", "run", "change")
    done = services.run_now(offered, actor=operator, reason="x", now=T0, args={"customer": "x"})
    assert done.args == {"customer": "x"}


def test_run_now_arguments_are_refused_for_a_job_not_offered_at_run_time() -> None:
    beat = ScheduleFactory.create(tenant="acme", key="acme.beat", job="billing.heartbeat")
    root = User.objects.create_superuser("root")
    with pytest.raises(JobsError, match=r"args: job 'billing\.heartbeat' is not offered"):
        services.run_now(beat, actor=root, reason="x", now=T0, args={"copies": 2})
    assert not Occurrence.objects.exists()


def test_run_now_arguments_on_the_tasks_policy_record_are_refused_even_for_a_superuser() -> None:
    """The attack of finding 1: ``run`` on the tasks' policy record ran any @task with
    arguments of the attacker's choosing."""
    with use_clock(FakeClock(T0)):
        enqueue(TASKS_JOB, args={"task": "tests.workerapp.tasks.add", "backend": "default"})
    record = Schedule.objects.get(key=policy_key(TASKS_JOB))
    runner = staff("ron", "", "view", "run")
    hostile = {**HOSTILE, "args": [], "kwargs": {}}
    with pytest.raises(Forbidden):
        services.run_now(record, actor=runner, reason="x", now=T0, args=hostile)
    root = User.objects.create_superuser("root")
    with pytest.raises(JobsError, match="never offered at run time"):
        services.run_now(record, actor=root, reason="x", now=T0, args=hostile)
    assert not AuditRecord.objects.filter(action="run_now").exists()


def test_the_admins_run_now_with_arguments_needs_change(offered: Schedule) -> None:
    runner = staff("ron", "acme", "view", "run")
    form = {"action": "run_now", "_selected_action": [offered.pk], "confirm": "yes"}
    url = reverse("admin:django_jobs_schedule_changelist")
    with use_clock(FakeClock(T0)):
        response = logged_in(runner).post(
            url, {**form, "reason": "x", "args": '{"customer": "x"}'}, follow=True
        )
    assert "ron may not give a run arguments of its own" in response.content.decode()
    assert not Occurrence.objects.exists()


def jobs(*argv: str) -> str:
    out = StringIO()
    call_command("jobs", *argv, stdout=out)
    return out.getvalue()


def test_jobs_run_now_with_args_needs_change(offered: Schedule) -> None:
    staff("ron", "acme", "view", "run")
    argv: list[Any] = ["run-now", "acme.report", "--tenant", "acme", "--actor", "ron"]
    with use_clock(FakeClock(T0)), pytest.raises(CommandError, match="needs the change_schedule"):
        jobs(*argv, "--reason", "x", "--args", '{"customer": "x"}')
    assert not Occurrence.objects.exists()
    with use_clock(FakeClock(T0)):
        jobs(*argv, "--reason", "x")
    assert Occurrence.objects.filter(schedule=offered).count() == 1
