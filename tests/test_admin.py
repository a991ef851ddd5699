"""Django admin: scoped by object and tenant permissions, actions through the service layer."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from django_jobs import runbooks, store
from django_jobs.models import AuditRecord, Occurrence, Schedule
from django_jobs.permissions import grant_tenant
from django_jobs.testing import FakeClock, use_clock

from .factories import T0, ScheduleFactory, dead_occurrence
from .storeutil import claim, plan

pytestmark = pytest.mark.django_db


@pytest.fixture
def schedules() -> tuple[Schedule, Schedule]:
    acme = ScheduleFactory.create(tenant="acme", key="billing.nightly", job="billing.heartbeat")
    globex = ScheduleFactory.create(tenant="globex", key="billing.nightly", job="billing.heartbeat")
    for s in (acme, globex):
        runbooks.write(s)
    return acme, globex


@pytest.fixture
def alice(schedules) -> Client:
    """Staff of tenant acme: may view and disable acme's schedules, nothing of globex."""
    user = User.objects.create_user("alice", password="pw", is_staff=True)
    group = Group.objects.create(name="acme-ops")
    user.groups.add(group)
    grant_tenant(group, "acme", "view", "disable")
    client = Client()
    client.force_login(user)
    return client


def changelist(model: str) -> str:
    return reverse(f"admin:django_jobs_{model}_changelist")


def test_staff_of_one_tenant_never_see_another_tenants_schedules(alice, schedules) -> None:
    _, globex = schedules
    page = alice.get(changelist("schedule")).content.decode()
    assert "acme/billing.nightly" in page
    assert "globex/billing.nightly" not in page
    # Nor by editing the URL.
    response = alice.get(reverse("admin:django_jobs_schedule_change", args=[globex.pk]))
    assert response.status_code == 302
    assert Schedule.objects.filter(pk=globex.pk, enabled=True).exists()


def test_a_bulk_action_with_a_forged_id_changes_nothing_it_may_not_see(alice, schedules) -> None:
    _, globex = schedules
    response = alice.post(
        changelist("schedule"),
        {
            "action": "disable_schedules",
            "_selected_action": [globex.pk],
            "confirm": "yes",
            "reason": "forged",
        },
    )
    assert response.status_code in (200, 302)
    assert Schedule.objects.get(pk=globex.pk).enabled is True
    assert not AuditRecord.objects.filter(action="disable").exists()


def test_disable_needs_the_confirmation_and_a_reason(alice, schedules) -> None:
    acme, _ = schedules
    first = alice.post(
        changelist("schedule"), {"action": "disable_schedules", "_selected_action": [acme.pk]}
    )
    assert first.status_code == 200
    assert b"Yes, disable schedules" in first.content
    assert Schedule.objects.get(pk=acme.pk).enabled is True
    missing = alice.post(
        changelist("schedule"),
        {
            "action": "disable_schedules",
            "_selected_action": [acme.pk],
            "confirm": "yes",
            "reason": "",
        },
    )
    assert missing.status_code == 200  # the form again, with its error
    assert Schedule.objects.get(pk=acme.pk).enabled is True
    done = alice.post(
        changelist("schedule"),
        {
            "action": "disable_schedules",
            "_selected_action": [acme.pk],
            "confirm": "yes",
            "reason": "partner outage",
        },
        follow=True,
    )
    assert "Disabled acme/billing.nightly." in done.content.decode()
    audit = AuditRecord.objects.get(action="disable")
    assert (audit.actor, audit.reason) == ("alice", "partner outage")


def test_an_action_the_user_lacks_is_not_offered(alice, schedules) -> None:
    page = alice.get(changelist("schedule")).content.decode()
    assert "disable_schedules" in page
    assert "run_now" not in page


def test_root_replays_a_dead_occurrence_from_the_dead_letter_list(root_client, schedules) -> None:
    acme, _ = schedules
    occurrence = dead_occurrence(acme)
    listing = root_client.get(changelist("occurrence") + "?dead=yes").content.decode()
    assert str(acme) in listing
    schedules_page = root_client.get(changelist("schedule")).content.decode()
    (acme_row,) = [r for r in schedules_page.split("<tr") if ">acme/billing.nightly<" in r]
    outcome_cell = acme_row.split('class="field-last_outcome"')[1].split("</td>")[0]
    assert outcome_cell.endswith(">dead"), outcome_cell
    done = root_client.post(
        changelist("occurrence"),
        {
            "action": "replay",
            "_selected_action": [occurrence.pk],
            "confirm": "yes",
            "reason": "fixed the template",
        },
        follow=True,
    )
    assert f"Replayed {occurrence.pk}: attempt 2 is due now." in done.content.decode()
    assert Occurrence.objects.get().state == "scheduled"


def test_occurrence_state_is_read_only_and_audit_records_cannot_be_deleted(
    root_client, schedules
) -> None:
    acme, _ = schedules
    plan(acme, T0 + timedelta(minutes=1), now=T0)
    occurrence = Occurrence.objects.get()
    root_client.post(
        reverse("admin:django_jobs_occurrence_change", args=[occurrence.pk]), {"state": "completed"}
    )
    assert Occurrence.objects.get().state == "scheduled"
    record = AuditRecord.objects.create(
        at=T0, actor="x", action="a", target_type="schedule", target_id=str(acme.pk), reason="r"
    )
    response = root_client.post(
        reverse("admin:django_jobs_auditrecord_delete", args=[record.pk]), {"post": "yes"}
    )
    assert response.status_code == 403
    assert AuditRecord.objects.filter(pk=record.pk).exists()


def test_the_schedule_page_shows_its_runbooks_and_audit(root_client, schedules) -> None:
    acme, _ = schedules
    page = root_client.get(
        reverse("admin:django_jobs_schedule_change", args=[acme.pk])
    ).content.decode()
    assert "python manage.py jobs disable billing.nightly --tenant acme" in page
    assert "Runbooks" in page


def readonly(page: str, field: str) -> str:
    """The value a change page shows for read-only ``field``."""
    block = page.split(f"field-{field}", 1)[1]
    return block.split('<div class="readonly">', 1)[1].split("</div>", 1)[0].strip()


def test_the_schedule_page_shows_its_last_start_and_completion_read_from_its_occurrences(
    root_client, schedules
) -> None:
    acme, globex = schedules
    plan(acme, T0, now=T0)
    (lease,) = claim("w", T0 + timedelta(minutes=1))
    store.complete([lease], now=T0 + timedelta(minutes=2))
    page = root_client.get(
        reverse("admin:django_jobs_schedule_change", args=[acme.pk])
    ).content.decode()
    assert readonly(page, "last_started") == "2026-03-01 12:01:00 UTC"
    assert readonly(page, "last_completed") == "2026-03-01 12:02:00 UTC"
    never = root_client.get(reverse("admin:django_jobs_schedule_change", args=[globex.pk]))
    assert readonly(never.content.decode(), "last_completed") == "-"


def test_the_schedule_list_reads_lateness_from_the_injected_clock(root_client, schedules) -> None:
    acme, _ = schedules
    plan(acme, T0, now=T0)  # due at T0, not started
    with use_clock(FakeClock(T0 + timedelta(seconds=90))):
        page = root_client.get(changelist("schedule")).content.decode()
    (acme_row,) = [r for r in page.split("<tr") if ">acme/billing.nightly<" in r]
    assert ">1 min 30 s late<" in acme_row


def test_an_admin_action_acts_at_the_injected_clocks_instant(root_client, schedules) -> None:
    acme, _ = schedules
    with use_clock(FakeClock(T0)):
        root_client.post(
            changelist("schedule"),
            {
                "action": "run_now",
                "_selected_action": [acme.pk],
                "confirm": "yes",
                "reason": "catch up",
            },
        )
    assert Occurrence.objects.get(schedule=acme).scheduled_at == T0
    assert AuditRecord.objects.get(action="run_now").at == T0


def test_the_admins_run_now_takes_arguments_of_its_own_audited_with_them(
    root_client, schedules, settings
) -> None:
    acme, _ = schedules
    # Run-now arguments reach only the jobs offered at run time: here by the setting.
    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "RUNTIME_JOBS": ["billing.heartbeat"]}
    form = {"action": "run_now", "_selected_action": [acme.pk], "confirm": "yes"}
    with use_clock(FakeClock(T0)):
        page = root_client.post(
            changelist("schedule"), {"action": "run_now", "_selected_action": [acme.pk]}
        )
        assert 'name="args"' in page.content.decode()  # the confirmation asks for them
        refused = root_client.post(
            changelist("schedule"), {**form, "reason": "x", "args": "[1, 2]"}
        )
        assert "arguments: must be a JSON object" in refused.content.decode()
        refused = root_client.post(changelist("schedule"), {**form, "reason": "x", "args": "{oops"})
        assert "arguments: not JSON" in refused.content.decode()
        assert not Occurrence.objects.exists()
        root_client.post(
            changelist("schedule"),
            {**form, "reason": "resend to globex", "args": '{"customer": "globex"}'},
        )
    occurrence = Occurrence.objects.get(schedule=acme)
    assert occurrence.args == {"customer": "globex"}
    audited = AuditRecord.objects.get(action="run_now")
    assert (audited.reason, audited.after["args"]) == ("resend to globex", {"customer": "globex"})


def test_the_admins_run_now_without_arguments_runs_with_the_schedules(
    root_client, schedules
) -> None:
    acme, _ = schedules
    Schedule.objects.filter(pk=acme.pk).update(args={"copies": 2})
    with use_clock(FakeClock(T0)):
        root_client.post(
            changelist("schedule"),
            {"action": "run_now", "_selected_action": [acme.pk], "confirm": "yes", "reason": "x"},
        )
    assert Occurrence.objects.get(schedule=acme).args == {"copies": 2}
    assert "args" not in AuditRecord.objects.get(action="run_now").after
