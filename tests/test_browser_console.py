"""The console in a real browser (Playwright driving Debian's Chromium): the dashboard as a
scoped user sees it, a run-time schedule created in the admin and run by a replica that was
already serving, the form's refusals, an edit in the audit with before and after, cancelling
an occurrence, replaying dead letters with one reason, pausing a tenant."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from guardian.shortcuts import assign_perm

from django_jobs import store
from django_jobs.models import AuditRecord, Occurrence, Schedule
from django_jobs.safe_error import SafeError

from . import test_browser
from .concurrency import wait_until
from .factories import ScheduleFactory, dead_occurrence
from .processes import FileClock, clocked_replica, log_tail
from .storeutil import claim, plan
from .test_browser import SHOTS, login, run_action

# The browser tests' fixtures: a live server, and a Chromium page.
server = test_browser.server
page = test_browser.page

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


def finished(schedule: Schedule, outcomes: list[str], now: datetime) -> None:
    """Occurrences of ``schedule`` ten minutes apart up to ``now``, ended as ``outcomes``."""
    for n, outcome in enumerate(outcomes):
        at = now - timedelta(minutes=10 * (len(outcomes) - n))
        plan(schedule, at, now=at)
        (lease,) = claim("replica-1", at)
        store.mark_started([lease], now=at)
        if outcome == "completed":
            store.complete([lease], now=at + timedelta(seconds=2))
        else:
            store.dead_letter(lease, now=at, error=SafeError("RuntimeError", "ledger closed"))


def test_a_user_with_permission_on_one_schedule_sees_only_it_on_the_dashboard(page, server):
    now = datetime.now(UTC)
    mine = ScheduleFactory.create(tenant="acme", key="billing.nightly", job="billing.heartbeat")
    theirs = ScheduleFactory.create(tenant="globex", key="ledger.close", job="billing.heartbeat")
    finished(mine, ["completed", "completed", "dead"], now)
    finished(theirs, ["dead", "dead", "dead", "dead"], now)
    User.objects.create_superuser("root", "root@example.com", "pw")
    ann = User.objects.create_user("ann", password="pw", is_staff=True)
    assign_perm("django_jobs.view_schedule", ann, mine)

    login(page, server, "root", "pw")
    page.goto(f"{server.url}/admin/django_jobs/")
    page.click("#jobs-dashboard-link")
    assert "globex/ledger.close" in page.inner_text("#jobs-lines")
    assert page.locator("#jobs-chart rect.jobs-dead").count() >= 2
    page.screenshot(path=str(SHOTS / "admin-dashboard.png"), full_page=True)

    page.context.clear_cookies()
    login(page, server, "ann", "pw")
    page.goto(f"{server.url}/admin/django_jobs/schedule/dashboard/")
    lines = page.inner_text("#jobs-lines")
    assert "acme/billing.nightly" in lines
    assert "globex" not in page.content()
    # Her chart counts her schedule's occurrences only: one dead, two completed.
    titles = page.locator("#jobs-chart rect title").all_text_contents()
    counted = sum(int(re.findall(r": (\d+) ", t)[0]) for t in titles)
    assert counted == 3
    assert sum(1 for t in titles if t.endswith(" dead")) == 1
    assert page.locator("#jobs-replicas").count() == 0  # the fleet needs view_replica
    page.screenshot(path=str(SHOTS / "admin-dashboard-scoped.png"), full_page=True)


def fill_schedule_form(page, **fields: str) -> None:
    for name, value in fields.items():
        selector = f"[name={name}]"
        if page.locator(f"select{selector}").count():
            page.select_option(f"select{selector}", value)
        else:
            page.fill(selector, value)


BASIC = {
    "tenant": "acme",
    "key": "acme.browser-made",
    "job": "proc.effect",
    "timing_kind": "cron",
    "cron": "* * * * *",
    "keep_for": "7 00:00:00",
    "operating_owner": "ops",
    "record_owner": "billing",
    "reason": "made in the admin",
}


@pytest.mark.processes
def test_a_schedule_created_in_the_admin_runs_on_a_replica_without_a_restart(
    page, server, tmp_path: Path
):
    start = datetime.now(UTC).replace(microsecond=0)
    clock = FileClock(tmp_path / "clock", start)
    replica = clocked_replica("serving", tmp_path, clock)
    try:
        replica.wait_logged("worker.started")
        User.objects.create_superuser("root", "root@example.com", "pw")
        login(page, server, "root", "pw")
        page.goto(f"{server.url}/admin/django_jobs/schedule/")
        page.click(".object-tools a.addlink")
        page.wait_for_selector("#jobs-schedule-form")
        fill_schedule_form(page, **BASIC)
        page.screenshot(path=str(SHOTS / "admin-schedule-add.png"), full_page=True)
        page.click("input[name=jobs-save]")
        assert "Created acme/acme.browser-made." in page.inner_text(".messagelist")
        schedule = Schedule.objects.get(tenant="acme", key="acme.browser-made")
        assert schedule.origin == "runtime"

        # The replica's clock moves past the next minute: it plans and runs the new
        # schedule, never having been restarted.
        clock.set(start + timedelta(minutes=2))
        wait_until(
            lambda: Occurrence.objects.filter(schedule=schedule, state="completed").exists(),
            timeout=60,
            what=lambda: f"the replica to run the new schedule: {log_tail(replica)}",
        )
        assert replica.alive
    finally:
        replica.stop()


def test_a_bad_cron_in_the_form_is_refused_with_the_declarations_message(page, server):
    User.objects.create_superuser("root", "root@example.com", "pw")
    login(page, server, "root", "pw")
    page.goto(f"{server.url}/admin/django_jobs/schedule/add/")
    fill_schedule_form(page, **{**BASIC, "job": "billing.send_statements", "cron": "61 * * * *"})
    page.click("input[name=jobs-save]")
    error = page.inner_text(".field-cron .errorlist")
    assert error == (
        "schedule 'acme.browser-made': timing.cron: '61 * * * *' is not a valid cron "
        "expression: cron field 'minute' is '61': must be 0-59"
    )
    page.screenshot(path=str(SHOTS / "admin-schedule-refused.png"), full_page=True)
    assert not Schedule.objects.filter(key="acme.browser-made").exists()


def test_an_edit_shows_up_in_the_audit_with_before_and_after(page, server):
    User.objects.create_superuser("root", "root@example.com", "pw")
    login(page, server, "root", "pw")
    page.goto(f"{server.url}/admin/django_jobs/schedule/add/")
    fill_schedule_form(page, **{**BASIC, "job": "billing.send_statements"})
    page.click("input[name=jobs-save]")
    schedule = Schedule.objects.get(key="acme.browser-made")

    page.goto(f"{server.url}/admin/django_jobs/schedule/{schedule.pk}/change/")
    page.click("a.jobs-edit")
    page.fill("[name=cron]", "30 7 * * 1-5")
    page.fill("[name=reason]", "weekdays only")
    page.click("input[name=jobs-save]")
    assert "Saved acme/acme.browser-made." in page.inner_text(".messagelist")
    assert "schedule.timing_changed: weekdays only" in page.inner_text("#content")

    page.click("a.jobs-audit-all")
    record = AuditRecord.objects.get(action="schedule.timing_changed")
    page.click(f"a[href*='/auditrecord/{record.pk}/change/']")
    before, after = page.inner_text(".field-before_shown"), page.inner_text(".field-after_shown")
    assert '"cron": "* * * * *"' in before
    assert '"cron": "30 7 * * 1-5"' in after
    page.screenshot(path=str(SHOTS / "admin-schedule-edit-audit.png"), full_page=True)
    assert record.before == {"cron": "* * * * *"}


def test_cancel_an_occurrence_and_replay_dead_letters_with_one_reason(page, server):
    now = datetime.now(UTC)
    User.objects.create_superuser("root", "root@example.com", "pw")
    schedule = ScheduleFactory.create(tenant="acme", key="billing.nightly", job="billing.heartbeat")
    dead = [dead_occurrence(schedule, now - timedelta(hours=h)) for h in (1, 2)]
    plan(schedule, now + timedelta(hours=1), now=now)
    waiting = Occurrence.objects.get(schedule=schedule, state="scheduled")

    login(page, server, "root", "pw")
    page.goto(f"{server.url}/admin/django_jobs/occurrence/")
    page.check(f"input[name=_selected_action][value='{waiting.pk}']")
    run_action(page, "cancel")
    page.fill("textarea[name=reason]", "customer left")
    page.click("input[name=jobs-confirm]")
    assert f"Cancelled {waiting.pk}." in page.inner_text(".messagelist")
    assert Occurrence.objects.get(pk=waiting.pk).state == "cancelled"

    page.goto(f"{server.url}/admin/django_jobs/occurrence/?dead=yes")
    for occurrence in dead:
        page.check(f"input[name=_selected_action][value='{occurrence.pk}']")
    run_action(page, "replay")
    page.fill("textarea[name=reason]", "ledger reopened")
    page.click("input[name=jobs-confirm]")
    messages = page.inner_text(".messagelist")
    assert all(f"Replayed {o.pk}" in messages for o in dead)
    replays = AuditRecord.objects.filter(action="replay")
    assert sorted(replays.values_list("target_id", flat=True)) == sorted(str(o.pk) for o in dead)
    assert set(replays.values_list("reason", flat=True)) == {"ledger reopened"}


def test_pause_and_resume_a_tenant(page, server):
    User.objects.create_superuser("root", "root@example.com", "pw")
    for key in ("billing.nightly", "billing.hourly"):
        ScheduleFactory.create(tenant="acme", key=key, job="billing.heartbeat")
    ScheduleFactory.create(tenant="globex", key="billing.nightly", job="billing.heartbeat")

    login(page, server, "root", "pw")
    page.goto(f"{server.url}/admin/django_jobs/schedule/dashboard/")
    page.click("text=Pause or resume a tenant")
    page.fill("[name=tenant]", "acme")
    page.select_option("[name=action]", "pause")
    page.fill("[name=reason]", "data migration")
    page.screenshot(path=str(SHOTS / "admin-tenant-pause.png"))
    page.click("input[name=jobs-tenant]")
    assert "Paused tenant 'acme'" in page.inner_text(".messagelist")
    assert dict(Schedule.objects.values_list("tenant", "enabled").distinct()) == {
        "acme": False,
        "globex": True,
    }
    page.goto(f"{server.url}/admin/django_jobs/schedule/tenant/?tenant=acme&action=resume")
    page.fill("[name=reason]", "migration done")
    page.click("input[name=jobs-tenant]")
    assert "Resumed tenant 'acme'" in page.inner_text(".messagelist")
    assert Schedule.objects.filter(enabled=False).count() == 0
