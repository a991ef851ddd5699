"""Issue #33, finding 10: JSON text nested 100,000 deep is refused naming the field, never a
``RecursionError``: the admin's run-now confirmation, the console's schedule form, and
``jobs run-now --args``."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from django_jobs.models import Occurrence, Schedule
from django_jobs.testing import FakeClock, use_clock

from .console_forms import form_data
from .factories import T0, ScheduleFactory

pytestmark = pytest.mark.django_db

DEEP = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a": ' * 100_000 + "1" + "}" * 100_000
REFUSED = "arguments: nested more than 32 levels deep"


@pytest.fixture
def offered() -> Schedule:
    """A schedule whose job is offered at run time (the example's)."""
    return ScheduleFactory.create(tenant="acme", key="acme.report", job="billing.send_statements")


@pytest.mark.parametrize("text", [DEEP, DEEP_OBJECT], ids=["list", "object"])
def test_the_run_now_confirmation_refuses_deep_json_naming_the_field(
    root_client, offered, text
) -> None:
    form = {"action": "run_now", "_selected_action": [offered.pk], "confirm": "yes"}
    with use_clock(FakeClock(T0)):
        response = root_client.post(
            reverse("admin:django_jobs_schedule_changelist"),
            {**form, "reason": "x", "args": text},
        )
    assert response.status_code == 200
    assert REFUSED in response.content.decode()
    assert not Occurrence.objects.exists()


def test_the_schedule_form_refuses_deep_json_on_the_arguments_field(root_client) -> None:
    form = form_data(key="acme.deep", args=DEEP_OBJECT, record_owner="ops", reason="x")
    with use_clock(FakeClock(T0)):
        response = root_client.post(reverse("admin:django_jobs_schedule_add"), form)
    assert response.status_code == 200
    field = response.content.decode().split('class="form-row field-args"')[1].split("</div>")[0]
    assert REFUSED in field
    assert not Schedule.objects.filter(key="acme.deep").exists()


def test_json_within_the_depth_bound_is_still_taken(root_client, offered) -> None:
    nested = '{"a": ' * 32 + "1" + "}" * 32  # the outermost object and 31 within it
    form = {"action": "run_now", "_selected_action": [offered.pk], "confirm": "yes"}
    with use_clock(FakeClock(T0)):
        root_client.post(
            reverse("admin:django_jobs_schedule_changelist"),
            {**form, "reason": "x", "args": nested},
        )
    assert Occurrence.objects.filter(schedule=offered).count() == 1


def test_brackets_inside_strings_do_not_count_as_nesting(root_client, offered) -> None:
    text = '{"note": "' + "[{" * 1000 + '\\"]"}'
    form = {"action": "run_now", "_selected_action": [offered.pk], "confirm": "yes"}
    with use_clock(FakeClock(T0)):
        root_client.post(
            reverse("admin:django_jobs_schedule_changelist"), {**form, "reason": "x", "args": text}
        )
    assert Occurrence.objects.get(schedule=offered).args == {"note": "[{" * 1000 + '"]'}


def test_jobs_run_now_refuses_deep_json_naming_the_option(offered) -> None:
    User.objects.create_superuser("ops")
    argv = ["run-now", "acme.report", "--tenant", "acme", "--actor", "ops", "--reason", "x"]
    with pytest.raises(CommandError, match="--args: nested more than 32 levels deep"):
        call_command("jobs", *argv, "--args", DEEP, stdout=StringIO())
    assert not Occurrence.objects.exists()
