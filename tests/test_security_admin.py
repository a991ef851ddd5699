# ruff: noqa: F811  (the fixtures of tests/test_admin.py are reused by name)
"""The admin under hostile use: forged ids, edited URLs, bad reasons, hostile error text.

Every refusal is a 302/403/404 (never a 500) and changes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from django_jobs.models import AuditRecord, Occurrence, Runbook, Schedule
from django_jobs.permissions import grant_tenant

from .factories import T0, dead_occurrence
from .snapshots import snapshot
from .test_admin import alice, schedules  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db

REFUSED = (302, 403, 404)


@pytest.fixture
def dead(schedules) -> dict[str, Occurrence]:
    """A dead occurrence of each tenant's schedule, its error carrying markup."""
    found = {}
    for schedule in schedules:
        found[schedule.tenant] = dead_occurrence(
            schedule, message="<script>alert('x')</script> & <b>bold</b>"
        )
    return found


@pytest.fixture
def audit(schedules) -> dict[str, AuditRecord]:
    return {
        s.tenant: AuditRecord.objects.create(
            at=T0,
            actor="root",
            action="disable",
            tenant=s.tenant,
            target_type="schedule",
            target_id=str(s.pk),
            reason=f"{s.tenant} secret reason",
        )
        for s in schedules
    }


def url(model: str, view: str, *args: Any) -> str:
    return reverse(f"admin:django_jobs_{model}_{view}", args=args)


def confirm(client: Client, model: str, action: str, ids: list[Any], **data: Any) -> Any:
    return client.post(
        url(model, "changelist"),
        {"action": action, "_selected_action": ids, "confirm": "yes", **data},
    )


# --- the confirmation step ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({}, "This field is required."),
        ({"reason": ""}, "This field is required."),
        ({"reason": "   \n  "}, "This field is required."),
        ({"reason": "x" * 100_000}, "Ensure this value has at most 2000 characters"),
        ({"reason": "partner\x00down"}, "Null characters are not allowed."),
    ],
)
def test_a_missing_blank_oversized_or_nul_reason_shows_the_form_again(
    alice,
    schedules,
    data,
    error,
) -> None:
    acme, _ = schedules
    before = snapshot()
    response = confirm(alice, "schedule", "disable_schedules", [acme.pk], **data)
    assert response.status_code == 200
    assert error in response.content.decode()
    assert snapshot() == before


# --- forged ids in an action POST --------------------------------------------------------------


@pytest.mark.parametrize(
    "forged",
    [
        ["{globex}"],  # another tenant's schedule
        ["{acme}", "{globex}"],  # one allowed, one smuggled in
        ["999999999"],
        ["abc"],
        ["1 OR 1=1"],
        ["-1"],
        [""],
        ["\x00"],
        ["9" * 40],  # beyond bigint
    ],
)
def test_forged_ids_in_a_bulk_action_change_nothing_outside_the_users_scope(
    alice,
    schedules,
    forged,
) -> None:
    acme, globex = schedules
    ids = [i.format(acme=acme.pk, globex=globex.pk) for i in forged]
    response = confirm(alice, "schedule", "disable_schedules", ids, reason="forged")
    assert response.status_code in (200, 302)
    assert Schedule.objects.get(pk=globex.pk).enabled is True
    assert not AuditRecord.objects.filter(tenant="globex").exists()
    if str(acme.pk) not in ids:
        assert Schedule.objects.get(pk=acme.pk).enabled is True


@pytest.mark.parametrize(
    "forged", ["{globex}", "00000000-0000-0000-0000-000000000000", "zz", "\x00"]
)
def test_forged_occurrence_ids_in_a_replay_change_nothing(root_of_acme, dead, forged) -> None:
    before = snapshot()
    ident = forged.format(globex=dead["globex"].pk)
    response = confirm(root_of_acme, "occurrence", "replay", [ident], reason="forged")
    assert response.status_code in (200, 302)
    assert snapshot() == before


@pytest.fixture
def root_of_acme(schedules) -> Client:
    """Staff with every action on tenant acme only."""
    user = User.objects.create_user("acme-root", is_staff=True)
    group = Group.objects.create(name="acme-root")
    user.groups.add(group)
    grant_tenant(group, "acme")
    client = Client()
    client.force_login(user)
    return client


# --- edited URLs ------------------------------------------------------------------------------


def foreign_pages(schedules, dead, audit) -> list[str]:
    _, globex = schedules
    runbook = Runbook.objects.filter(schedule=globex).first()
    assert runbook is not None
    pages = []
    for model, pk in [
        ("schedule", globex.pk),
        ("occurrence", dead["globex"].pk),
        ("runbook", runbook.pk),
        ("auditrecord", audit["globex"].pk),
    ]:
        pages += [url(model, "change", pk), url(model, "history", pk), url(model, "delete", pk)]
    return pages


@pytest.mark.parametrize("method", ["get", "post"])
def test_pages_of_another_tenants_objects_are_refused_and_show_nothing(
    root_of_acme,
    schedules,
    dead,
    audit,
    method,
) -> None:
    before = snapshot()
    for page in foreign_pages(schedules, dead, audit):
        response = getattr(root_of_acme, method)(page, {"post": "yes", "enabled": "off"})
        assert response.status_code in REFUSED, page
        body = response.content.decode()
        assert "globex" not in body, page
        assert "secret reason" not in body, page
    assert snapshot() == before


@pytest.mark.parametrize("ident", ["abc", "0", "999999999", "%00", "1%20OR%201=1"])
@pytest.mark.parametrize("model", ["schedule", "occurrence", "runbook", "auditrecord"])
def test_garbage_object_ids_in_urls_are_refused_not_a_500(
    root_of_acme, schedules, model, ident
) -> None:
    base = url(model, "changelist")
    for suffix in ("change/", "history/", "delete/"):
        assert root_of_acme.get(f"{base}{ident}/{suffix}").status_code in REFUSED


def test_a_user_without_any_grant_sees_nothing_and_has_no_actions(schedules, dead, audit) -> None:
    client = Client()
    client.force_login(User.objects.create_user("staff", is_staff=True))
    for model in ("schedule", "occurrence", "runbook", "auditrecord"):
        page = client.get(url(model, "changelist"))
        assert page.status_code == 200
        body = page.content.decode()
        assert "acme" not in body, model
        assert "globex" not in body, model
        assert 'name="action"' not in body, model
    before = snapshot()
    acme, _ = schedules
    for model, action, pk in [
        ("schedule", "disable_schedules", acme.pk),
        ("schedule", "enable_schedules", acme.pk),
        ("schedule", "run_now", acme.pk),
        ("occurrence", "replay", dead["acme"].pk),
    ]:
        assert confirm(client, model, action, [pk], reason="x").status_code in (200, 302)
    assert snapshot() == before


def test_a_non_staff_user_is_sent_to_the_login_page(schedules) -> None:
    client = Client()
    client.force_login(User.objects.create_user("customer"))
    acme, _ = schedules
    for page in (url("schedule", "changelist"), url("schedule", "change", acme.pk)):
        response = client.get(page)
        assert response.status_code == 302
        assert "/login/" in response["Location"]


@pytest.mark.parametrize(
    ("model", "action"),
    [("schedule", "run_now"), ("occurrence", "replay")],
)
def test_an_action_the_user_lacks_is_refused_even_when_posted(
    alice,
    dead,
    model,
    action,
) -> None:
    """alice may view and disable acme's schedules: not run them, not replay."""
    target = dead["acme"]
    pk = target.schedule_id if model == "schedule" else target.pk
    before = snapshot()
    response = confirm(alice, model, action, [pk], reason="not mine to do")
    assert response.status_code in (200, 302)
    assert snapshot() == before


def test_the_history_page_of_a_visible_schedule_opens(alice, schedules) -> None:
    acme, _ = schedules
    assert alice.get(url("schedule", "history", acme.pk)).status_code == 200


# --- audit records ------------------------------------------------------------------------------


def test_audit_records_cannot_be_added_changed_or_deleted_even_by_a_superuser(
    root_client, audit
) -> None:
    record = audit["acme"]
    before = snapshot()
    assert root_client.get(url("auditrecord", "add")).status_code == 403
    assert (
        root_client.post(url("auditrecord", "add"), {"actor": "me", "reason": "x"}).status_code
        == 403
    )
    change = root_client.post(url("auditrecord", "change", record.pk), {"reason": "rewritten"})
    assert change.status_code == 403
    assert (
        root_client.post(url("auditrecord", "delete", record.pk), {"post": "yes"}).status_code
        == 403
    )
    bulk = root_client.post(
        url("auditrecord", "changelist"),
        {"action": "delete_selected", "_selected_action": [record.pk], "post": "yes"},
    )
    assert bulk.status_code in (200, 302)
    assert snapshot() == before


def test_schedules_and_occurrences_cannot_be_deleted_nor_occurrences_added_by_a_superuser(
    root_client,
    schedules,
    dead,
) -> None:
    """A schedule is added only through the console's form (the service layer): a post of
    the model's own fields there, without what the form needs, writes nothing."""
    acme, _ = schedules
    before = snapshot()
    assert root_client.get(url("occurrence", "add")).status_code == 403
    forged = root_client.post(
        url("schedule", "add"), {"tenant": "acme", "key": "forged", "job": "x"}
    )
    assert forged.status_code == 200  # the form again, with its errors
    assert "This field is required." in forged.content.decode()
    for model, pk in [("schedule", acme.pk), ("occurrence", dead["acme"].pk)]:
        assert root_client.post(url(model, "delete", pk), {"post": "yes"}).status_code == 403
        bulk = root_client.post(
            url(model, "changelist"),
            {"action": "delete_selected", "_selected_action": [pk], "post": "yes"},
        )
        assert bulk.status_code in (200, 302)
    assert snapshot() == before


# --- hostile text ---------------------------------------------------------------------------


def test_a_job_error_with_markup_is_escaped_on_every_page(root_client, dead) -> None:
    occurrence = dead["acme"]
    for page in (
        url("occurrence", "change", occurrence.pk),
        url("occurrence", "changelist"),
    ):
        body = root_client.get(page).content.decode()
        assert "<script>alert" not in body
        assert "<b>bold</b>" not in body
    body = root_client.get(url("occurrence", "change", occurrence.pk)).content.decode()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in body


@pytest.mark.parametrize(
    "query",
    [
        "?q=%00",
        "?q=" + "x" * 10_000,
        "?q=%27%3B%20DROP%20TABLE%20django_jobs_schedule%3B%20--",
        "?tenant=%00",
        "?tenant__exact=globex",
        "?tenant=globex",
        "?status=%00",
        "?enabled__exact=maybe",
        "?o=99",
        "?p=-1",
    ],
)
def test_hostile_list_queries_never_fail_nor_leak_another_tenant(
    root_of_acme,
    schedules,
    dead,
    query,
) -> None:
    for model in ("schedule", "occurrence"):
        response = root_of_acme.get(url(model, "changelist") + query)
        # 400: a parameter that is none of the list's filters (issue #33, finding 3).
        assert response.status_code in (200, 302, 400), (model, query)
        assert "globex/billing.nightly" not in response.content.decode()


def test_a_garbage_id_is_reported_and_the_whole_action_refused(alice, schedules) -> None:
    """Regression: a non-integer ``_selected_action`` raised ValueError: a 500."""
    acme, _ = schedules
    response = alice.post(
        url("schedule", "changelist"),
        {
            "action": "disable_schedules",
            "_selected_action": [acme.pk, "1 OR 1=1"],
            "confirm": "yes",
            "reason": "x",
        },
        follow=True,
    )
    assert "&#x27;1 OR 1=1&#x27; is not the id of a schedule: nothing was changed." in (
        response.content.decode()
    )
    assert Schedule.objects.get(pk=acme.pk).enabled is True
