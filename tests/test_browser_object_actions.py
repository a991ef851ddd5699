"""Acting where you look (issue #37), in Chromium: the Replay and Cancel buttons of an
occurrence's page and the Disable, Enable and Run now buttons of a schedule's page, each
through the list action's confirmation (which says what it will do), audited, and absent
(and refused) for a user without the permission."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Group, User

from django_jobs.models import AuditRecord, Occurrence, Schedule
from django_jobs.permissions import grant_tenant

from . import test_browser
from .factories import ScheduleFactory, dead_occurrence
from .snapshots import snapshot
from .storeutil import plan
from .test_browser import login

# The browser tests' fixtures: a live server, and a Chromium page.
server = test_browser.server
page = test_browser.page

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


def acme_nightly() -> Schedule:
    return ScheduleFactory.create(tenant="acme", key="billing.nightly", job="billing.heartbeat")


def operator(name: str, *actions: str) -> User:
    """Staff holding ``actions`` on tenant acme, password ``pw``."""
    user = User.objects.create_user(name, password="pw", is_staff=True)
    group = Group.objects.create(name=f"{name}-acme")
    user.groups.add(group)
    grant_tenant(group, "acme", *actions)
    return user


def occurrence_page(server, occurrence: Occurrence) -> str:
    return f"{server.url}/admin/django_jobs/occurrence/{occurrence.pk}/change/"


def crafted_post(page, server, occurrence: Occurrence, action: str) -> int:
    """A POST to the button's URL that the page never offered, with the session's CSRF
    token (what a user could send by hand); its status."""
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    response = page.request.post(
        f"{server.url}/admin/django_jobs/occurrence/{occurrence.pk}/{action}/",
        form={"csrfmiddlewaretoken": token, "confirm": "yes", "reason": "crafted"},
        headers={"Referer": occurrence_page(server, occurrence)},
    )
    status: int = response.status
    return status


def test_replay_a_dead_occurrence_from_its_page_audited(page, server) -> None:
    User.objects.create_superuser("root", "root@example.com", "pw")
    schedule = acme_nightly()
    occurrence = dead_occurrence(schedule, datetime.now(UTC), message="template missing")

    login(page, server, "root", "pw")
    page.goto(occurrence_page(server, occurrence))
    assert page.locator("button.jobs-cancel").count() == 0  # dead: nothing to cancel
    page.click("button.jobs-replay")
    said = page.inner_text(".jobs-consequence")
    assert "runs as attempt 2, trigger manual" in said
    assert "The retry budget starts afresh: up to 3 attempts (2 to 4)" in said
    page.fill("textarea[name=reason]", "template restored")
    page.click("input[name=jobs-confirm]")

    assert page.url == occurrence_page(server, occurrence)  # back where the operator was
    message = page.inner_text(".messagelist")
    assert f"Replayed {occurrence.pk}: attempt 2 is due now." in message
    assert "The retry budget starts afresh: up to 3 attempts (2 to 4)" in message
    assert "scheduled" in page.inner_text(".field-state")
    assert page.locator("button.jobs-cancel").count() == 1  # waiting again: cancellable
    record = AuditRecord.objects.get(action="replay")
    assert (
        record.actor,
        record.reason,
        record.target_type,
        record.target_id,
        record.schedule_id,
    ) == ("root", "template restored", "occurrence", str(occurrence.pk), schedule.pk)

    page.goto(f"{server.url}/admin/django_jobs/schedule/{schedule.pk}/change/")
    assert f"root replay of occurrence {occurrence.pk}: template restored" in page.inner_text(
        ".jobs-audit"
    )


def test_without_replay_permission_there_is_no_replay_button_and_a_crafted_post_is_refused(
    page, server
) -> None:
    schedule = acme_nightly()
    occurrence = dead_occurrence(schedule, datetime.now(UTC))
    operator("dora", "view", "disable")  # may cancel acme's, not replay them

    login(page, server, "dora", "pw")
    page.goto(occurrence_page(server, occurrence))
    assert "dead" in page.inner_text(".field-state")
    assert page.locator("button.jobs-replay").count() == 0
    before = snapshot()
    assert crafted_post(page, server, occurrence, "replay") == 403
    assert snapshot() == before
    assert not AuditRecord.objects.exists()
    assert Occurrence.objects.get().state == "dead"


def test_cancel_a_waiting_occurrence_from_its_page_audited(page, server) -> None:
    User.objects.create_superuser("root", "root@example.com", "pw")
    schedule = acme_nightly()
    now = datetime.now(UTC)
    plan(schedule, now + timedelta(hours=1), now=now)
    waiting = Occurrence.objects.get()

    login(page, server, "root", "pw")
    page.goto(occurrence_page(server, waiting))
    assert page.locator("button.jobs-replay").count() == 0  # not finished: nothing to replay
    page.click("button.jobs-cancel")
    assert "(scheduled, waiting) will not run" in page.inner_text(".jobs-consequence")
    page.fill("textarea[name=reason]", "customer left")
    page.click("input[name=jobs-confirm]")

    assert page.url == occurrence_page(server, waiting)
    assert f"Cancelled {waiting.pk}." in page.inner_text(".messagelist")
    assert Occurrence.objects.get().state == "cancelled"
    assert page.locator("button.jobs-replay").count() == 1  # cancelled: replayable
    record = AuditRecord.objects.get(action="cancel")
    assert (
        record.actor,
        record.reason,
        record.target_type,
        record.target_id,
        record.schedule_id,
    ) == ("root", "customer left", "occurrence", str(waiting.pk), schedule.pk)

    page.goto(f"{server.url}/admin/django_jobs/schedule/{schedule.pk}/change/")
    assert f"root cancel of occurrence {waiting.pk}: customer left" in page.inner_text(
        ".jobs-audit"
    )


def test_without_disable_permission_there_is_no_cancel_button_and_a_crafted_post_is_refused(
    page, server
) -> None:
    schedule = acme_nightly()
    now = datetime.now(UTC)
    plan(schedule, now + timedelta(hours=1), now=now)
    waiting = Occurrence.objects.get()
    operator("rita", "view", "replay")  # may replay acme's, not cancel them

    login(page, server, "rita", "pw")
    page.goto(occurrence_page(server, waiting))
    assert "scheduled" in page.inner_text(".field-state")
    assert page.locator("button.jobs-cancel").count() == 0
    before = snapshot()
    assert crafted_post(page, server, waiting, "cancel") == 403
    assert snapshot() == before
    assert not AuditRecord.objects.exists()
    assert Occurrence.objects.get().state == "scheduled"


def test_disable_enable_and_run_now_from_the_schedule_page(page, server) -> None:
    User.objects.create_superuser("root", "root@example.com", "pw")
    schedule = acme_nightly()
    schedule_page = f"{server.url}/admin/django_jobs/schedule/{schedule.pk}/change/"

    def act(button: str, reason: str) -> str:
        page.click(f"button.jobs-{button}")
        said = page.inner_text(".jobs-consequence")
        page.fill("textarea[name=reason]", reason)
        page.click("input[name=jobs-confirm]")
        assert page.url == schedule_page
        return str(said)

    login(page, server, "root", "pw")
    page.goto(schedule_page)
    assert page.locator("button.jobs-enable").count() == 0
    assert "an occurrence already running finishes" in act("disable", "partner outage")
    assert "Disabled acme/billing.nightly." in page.inner_text(".messagelist")
    assert Schedule.objects.get().enabled is False
    assert page.locator("button.jobs-disable, button.jobs-run-now").count() == 0

    assert "claim acme/billing.nightly's occurrences again" in act("enable", "partner back")
    assert "Enabled acme/billing.nightly." in page.inner_text(".messagelist")
    assert Schedule.objects.get().enabled is True

    assert "Its retry budget: up to 3 attempts (1 to 3)" in act("run-now", "catch up")
    assert "Planned a run of acme/billing.nightly." in page.inner_text(".messagelist")
    assert Occurrence.objects.get(schedule=schedule).trigger == "manual"
    assert list(AuditRecord.objects.order_by("id").values_list("actor", "action", "reason")) == [
        ("root", "disable", "partner outage"),
        ("root", "enable", "partner back"),
        ("root", "run_now", "catch up"),
    ]
    shown = "\n".join(page.locator(".jobs-audit").all_inner_texts())
    assert "root disable: partner outage" in shown
    assert "root enable: partner back" in shown
