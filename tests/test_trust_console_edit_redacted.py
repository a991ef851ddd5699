"""Issue #33, finding 9: the console's edit form shows a schedule's arguments redacted, as
its page does, never raw; saving keeps the stored value of what was left as shown and
replaces what was changed."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from django_jobs import services
from django_jobs.models import Schedule
from django_jobs.permissions import grant_tenant
from django_jobs.testing import FakeClock, use_clock

from .factories import T0, declaration

pytestmark = pytest.mark.django_db

TOKEN = "sk-live-4242424242424242"
STORED = {"customer": "acme", "api_token": TOKEN, "accounts": [3, 5]}
SHOWN = '{"accounts": [3, 5], "api_token": "[redacted]", "customer": "acme"}'


@pytest.fixture
def editor() -> Client:
    """A tenant operator with ``change`` on acme (no superuser)."""
    user = User.objects.create_user("carol", is_staff=True)
    group = Group.objects.create(name="acme-ops")
    user.groups.add(group)
    grant_tenant(group, "acme", "view", "change")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def schedule() -> Schedule:
    root = User.objects.create_superuser("root")
    return services.upsert_schedule(
        declaration("acme.report", tenant="acme", args=STORED), actor=root, reason="x", now=T0
    )


def edit_url(schedule: Schedule) -> str:
    return reverse("admin:django_jobs_schedule_edit", args=[schedule.pk])


def form(client: Client, schedule: Schedule) -> dict[str, Any]:
    """The edit form's fields as the page fills them (what a browser would send back)."""
    from django_jobs.console.forms import ScheduleForm

    bound = ScheduleForm(record=schedule)
    data = {name: bound[name].value() for name in bound.fields if name not in ("tenant", "key")}
    return {k: "" if v is None else v for k, v in data.items()} | {"reason": "edit"}


def save(client: Client, schedule: Schedule, **changes: Any) -> Any:
    with use_clock(FakeClock(T0)):
        return client.post(edit_url(schedule), {**form(client, schedule), **changes})


def test_the_edit_form_shows_the_arguments_redacted_never_raw(editor, schedule) -> None:
    page = editor.get(edit_url(schedule)).content.decode()
    assert TOKEN not in page
    assert "[redacted]" in page
    assert "acme" in page


def test_saving_what_was_shown_keeps_the_stored_secret(editor, schedule) -> None:
    response = save(editor, schedule, args=SHOWN, cron="30 7 * * *")
    assert response.status_code == 302
    schedule.refresh_from_db()
    assert (schedule.args, schedule.cron) == (STORED, "30 7 * * *")


def test_a_changed_value_replaces_its_own_and_unchanged_keys_keep_theirs(editor, schedule) -> None:
    typed = '{"accounts": [3, 5, 8], "api_token": "[redacted]", "customer": "globex"}'
    assert save(editor, schedule, args=typed).status_code == 302
    schedule.refresh_from_db()
    assert schedule.args == {"customer": "globex", "api_token": TOKEN, "accounts": [3, 5, 8]}


def test_a_new_secret_typed_in_replaces_the_stored_one(editor, schedule) -> None:
    typed = '{"accounts": [3, 5], "api_token": "sk-live-newnewnewnewnewnew", "customer": "acme"}'
    assert save(editor, schedule, args=typed).status_code == 302
    schedule.refresh_from_db()
    assert schedule.args["api_token"] == "sk-live-newnewnewnewnewnew"


def test_a_removed_key_is_removed(editor, schedule) -> None:
    assert save(editor, schedule, args='{"customer": "acme"}').status_code == 302
    schedule.refresh_from_db()
    assert schedule.args == {"customer": "acme"}


def test_the_marker_inside_a_changed_value_is_refused_naming_the_field(editor, schedule) -> None:
    typed = '{"accounts": [3, 5], "api_token": "x[redacted]", "customer": "acme"}'
    response = save(editor, schedule, args=typed)
    assert response.status_code == 200
    field = response.content.decode().split('class="form-row field-args"')[1].split("</div>")[0]
    assert "arguments: args[&#x27;api_token&#x27;] holds [redacted]" in field
    schedule.refresh_from_db()
    assert schedule.args == STORED
