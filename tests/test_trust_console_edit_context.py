"""Issue #33, finding 9 (review): the console's edit form keeps a value left as ``[redacted]``
only while the saved arguments still hide it, and only for the job it was stored for.

Some values are hidden because of what stands beside them (an unnamed AWS secret key only
beside its key id): changing the neighbour while keeping the secret would save arguments
whose page shows the secret. And a kept secret is the stored job's: switching the job while
keeping it would hand it to a job of the editor's choosing."""

from __future__ import annotations

import json
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

KEY_ID = "AKIAIOSFODNN7EXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS = {"aws": [KEY_ID, SECRET], "region": "eu-west-1"}
TOKEN = "sk-live-4242424242424242"
NAMED = {"customer": "acme", "api_token": TOKEN}
OTHER_JOB = "tests.other_report"


@pytest.fixture
def editor() -> Client:
    """A tenant operator with ``view`` and ``change`` on acme (no superuser)."""
    user = User.objects.create_user("carol", is_staff=True)
    group = Group.objects.create(name="acme-ops")
    user.groups.add(group)
    grant_tenant(group, "acme", "view", "change")
    client = Client()
    client.force_login(user)
    return client


def stored(args: dict[str, Any]) -> Schedule:
    root = User.objects.get_or_create(username="root", is_staff=True, is_superuser=True)[0]
    return services.upsert_schedule(
        declaration("acme.report", tenant="acme", args=args), actor=root, reason="x", now=T0
    )


def edit_url(schedule: Schedule) -> str:
    return reverse("admin:django_jobs_schedule_edit", args=[schedule.pk])


def shown(client: Client, schedule: Schedule) -> dict[str, Any]:
    """The arguments as the edit page's textarea shows them, parsed."""
    from django_jobs.console.forms import ScheduleForm

    page = client.get(edit_url(schedule))
    assert page.status_code == 200
    value = ScheduleForm(record=schedule)["args"].value()
    assert value in page.content.decode().replace("&quot;", '"')
    parsed: dict[str, Any] = json.loads(value)
    return parsed


def save(client: Client, schedule: Schedule, args: dict[str, Any], **changes: Any) -> Any:
    """Post the edit form as the page fills it, with ``args`` typed and ``changes`` made."""
    from django_jobs.console.forms import ScheduleForm

    bound = ScheduleForm(record=schedule)
    data = {name: bound[name].value() for name in bound.fields if name not in ("tenant", "key")}
    data = {k: "" if v is None else v for k, v in data.items()} | {"reason": "edit"}
    with use_clock(FakeClock(T0)):
        return client.post(edit_url(schedule), {**data, "args": json.dumps(args), **changes})


def args_error(response: Any) -> str:
    """The error shown on the arguments field."""
    assert response.status_code == 200
    page: str = response.content.decode()
    row = page.split('class="form-row field-args')[1].split("</div>")[0]
    return row.replace("&#x27;", "'")


def test_changing_the_neighbour_that_hides_a_kept_secret_is_refused(editor) -> None:
    """The review's reproduction: both halves shown as ``[redacted]``, the key id replaced,
    the secret left as shown. Before, the save was taken and the secret shown on the page."""
    schedule = stored({"aws": [KEY_ID, SECRET]})
    assert shown(editor, schedule) == {"aws": ["[redacted]", "[redacted]"]}

    response = save(editor, schedule, {"aws": ["x", "[redacted]"]})

    error = args_error(response)
    assert "args['aws'][1] was hidden because of the values beside it" in error
    assert "type it again or leave its neighbours unchanged" in error
    assert SECRET not in response.content.decode()
    schedule.refresh_from_db()
    assert schedule.args == {"aws": [KEY_ID, SECRET]}
    assert SECRET not in editor.get(edit_url(schedule)).content.decode()
    page = reverse("admin:django_jobs_schedule_change", args=[schedule.pk])
    assert SECRET not in editor.get(page).content.decode()


def test_removing_the_neighbour_that_hides_a_kept_secret_is_refused(editor) -> None:
    schedule = stored(AWS)
    response = save(editor, schedule, {"aws": ["[redacted]"], "region": "eu-west-1"})
    # A list cut short is typed anew: its marker is refused, the secret is not kept.
    assert "holds [redacted]" in args_error(response)
    response = save(editor, schedule, {"secret": "[redacted]", "region": "eu-west-1"})
    assert "holds [redacted]" in args_error(response)
    schedule.refresh_from_db()
    assert schedule.args == AWS


def test_an_unrelated_change_keeps_the_secrets_left_redacted(editor) -> None:
    schedule = stored(AWS)
    assert shown(editor, schedule) == {"aws": ["[redacted]", "[redacted]"], "region": "eu-west-1"}

    typed = {"aws": ["[redacted]", "[redacted]"], "region": "us-east-1"}
    assert save(editor, schedule, typed).status_code == 302

    schedule.refresh_from_db()
    assert schedule.args == {"aws": [KEY_ID, SECRET], "region": "us-east-1"}


def test_a_new_key_id_beside_the_kept_secret_still_hides_it(editor) -> None:
    """Rotating the key id to another of its shape keeps the secret hidden: taken."""
    schedule = stored(AWS)
    typed = {"aws": ["AKIAZZZZZZZZZZZZZZZZ", "[redacted]"], "region": "eu-west-1"}
    assert save(editor, schedule, typed).status_code == 302
    schedule.refresh_from_db()
    assert schedule.args["aws"] == ["AKIAZZZZZZZZZZZZZZZZ", SECRET]
    assert SECRET not in editor.get(edit_url(schedule)).content.decode()


def test_retyping_the_secret_with_its_neighbour_is_taken(editor) -> None:
    schedule = stored(AWS)
    retyped = "Zq8rXUtnFEMI/K7MDENG/bPxRfiCYNEWSECRETZ"
    typed = {"aws": ["x", retyped], "region": "eu-west-1"}
    assert save(editor, schedule, typed).status_code == 302
    schedule.refresh_from_db()
    assert schedule.args == typed


def test_switching_the_job_with_kept_secrets_is_refused(editor, registered) -> None:
    registered(OTHER_JOB, lambda run: None, runtime=True)
    schedule = stored(NAMED)
    typed = {"api_token": "[redacted]", "customer": "acme"}
    assert shown(editor, schedule) == typed

    response = save(editor, schedule, typed, job=OTHER_JOB)

    error = args_error(response)
    assert "args['api_token'] is kept as stored for job 'billing.send_statements'" in error
    assert f"the job is now '{OTHER_JOB}': type it again" in error
    schedule.refresh_from_db()
    assert (schedule.job, schedule.args) == ("billing.send_statements", NAMED)


def test_switching_the_job_with_the_secrets_typed_again_is_taken(editor, registered) -> None:
    registered(OTHER_JOB, lambda run: None, runtime=True)
    schedule = stored(NAMED)
    typed = {"api_token": "sk-live-5353535353535353", "customer": "acme"}
    assert save(editor, schedule, typed, job=OTHER_JOB).status_code == 302
    schedule.refresh_from_db()
    assert (schedule.job, schedule.args) == (OTHER_JOB, typed)


def test_switching_the_job_keeps_values_that_hide_nothing(editor, registered) -> None:
    registered(OTHER_JOB, lambda run: None, runtime=True)
    schedule = stored({"customer": "acme", "accounts": [3, 5]})
    typed = {"customer": "acme", "accounts": [3, 5]}
    assert save(editor, schedule, typed, job=OTHER_JOB).status_code == 302
    schedule.refresh_from_db()
    assert (schedule.job, schedule.args) == (OTHER_JOB, typed)
