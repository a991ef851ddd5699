"""The console's pages, through Django's test client: the dashboard (scoped like every page),
the form of a run-time schedule (validated as declarations are, audited before and after),
pausing a tenant, and the replicas' permission of their own."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from guardian.shortcuts import assign_perm

from django_jobs import store
from django_jobs.models import AuditRecord, Occurrence, Replica, Schedule
from django_jobs.safe_error import SafeError
from django_jobs.testing import FakeClock, use_clock

from .console_forms import form_data
from .factories import T0, ScheduleFactory
from .storeutil import claim, plan

pytestmark = pytest.mark.django_db

DASHBOARD = "admin:django_jobs_dashboard"


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def history(schedule: Schedule, outcomes: list[str], *, late: timedelta) -> None:
    """Occurrences of ``schedule`` an hour apart ending at T0, oldest first, each started
    ``late`` after its instant and ended with its outcome (``completed`` or ``dead``)."""
    for n, outcome in enumerate(outcomes):
        at = T0 - timedelta(hours=len(outcomes) - n)
        plan(schedule, at, now=at)
        (lease,) = claim("w", at + late)
        store.mark_started([lease], now=at + late)
        if outcome == "completed":
            store.complete([lease], now=at + late + timedelta(seconds=1))
        else:
            store.dead_letter(lease, now=at + late, error=SafeError("RuntimeError", "boom"))


def dashboard(client: Client, **query: Any) -> str:
    with use_clock(FakeClock(T0)):
        response = client.get(reverse(DASHBOARD), query)
    assert response.status_code == 200
    return response.content.decode()


def line(page: str, label: str) -> list[str]:
    """The cells of the dashboard's line of schedule ``label``."""
    for row in re.findall(r'<tr class="jobs-line">(.*?)</tr>', page, re.S):
        cells = [
            re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td.*?>(.*?)</td>", row, re.S)
        ]
        if cells[0].startswith(label):
            return cells
    raise AssertionError(f"no line of {label} on the dashboard")


def test_the_dashboard_shows_each_schedules_outcome_streak_lateness_and_dead_letters(
    root_client,
) -> None:
    failing = ScheduleFactory.create(tenant="acme", key="a.failing", max_attempts=1)
    healthy = ScheduleFactory.create(tenant="acme", key="a.healthy")
    history(failing, ["completed", "dead", "dead"], late=timedelta(seconds=4))
    history(healthy, ["completed", "completed"], late=timedelta(seconds=2))
    plan(healthy, T0 - timedelta(minutes=5), now=T0)  # due five minutes ago, not started

    page = dashboard(root_client)

    # The failing one first: it has dead letters.
    assert page.index("acme/a.failing") < page.index("acme/a.healthy")
    cells = line(page, "acme/a.failing")
    assert cells[2:5] == ["dead", "2", "1 / 2 / 0"]
    assert cells[5] == "4 s / 4 s"
    assert cells[7] == "2"
    assert line(page, "acme/a.healthy")[2:5] == ["completed", "0", "2 / 0 / 0"]
    assert re.search(r'id="jobs-due"><strong>1</strong>', page)
    # In UTC, never in Django's TIME_ZONE (Pacific/Chatham in the tests).
    since = T0 - timedelta(hours=24)
    assert f'from <span id="jobs-since">{since:%Y-%m-%d %H:%M:%S} UTC</span>' in page
    assert f'to <span id="jobs-now">{T0:%Y-%m-%d %H:%M:%S} UTC</span>' in page
    assert re.search(r'id="jobs-due-age"><strong>5 min</strong>', page)
    assert page.count('class="jobs-bar jobs-dead"') == 2  # two buckets hold a dead letter
    assert "<script" not in page.split('id="jobs-chart"')[1].split("</svg>")[0]


def test_a_user_with_permission_on_one_schedule_sees_only_it_on_the_dashboard() -> None:
    mine = ScheduleFactory.create(tenant="acme", key="a.mine")
    theirs = ScheduleFactory.create(tenant="globex", key="g.theirs")
    history(mine, ["completed"], late=timedelta(seconds=1))
    history(theirs, ["dead", "dead"], late=timedelta(seconds=1))
    plan(theirs, T0 - timedelta(minutes=1), now=T0)
    user = User.objects.create_user("ann", password="pw", is_staff=True)
    assign_perm("django_jobs.view_schedule", user, mine)
    Replica.objects.create(id="r1", host="h", pid=1, heartbeat_at=T0, started_at=T0)

    page = dashboard(logged_in(user))

    assert "acme/a.mine" in page
    assert "g.theirs" not in page
    assert 'class="jobs-bar jobs-dead"' not in page  # the chart counts hers alone
    assert page.count('class="jobs-bar jobs-completed"') == 1
    assert re.search(r'id="jobs-due"><strong>0</strong>', page)
    assert 'id="jobs-replicas"' not in page  # the fleet needs view_replica
    assert logged_in(user).get(reverse("admin:django_jobs_replica_changelist")).status_code == 403

    user.user_permissions.add(Permission.objects.get(codename="view_replica"))
    user = User.objects.get(pk=user.pk)  # permissions are cached on the object
    page = dashboard(logged_in(user))
    assert 'id="jobs-replicas"' in page
    assert "<td>r1</td>" in page
    assert logged_in(user).get(reverse("admin:django_jobs_replica_changelist")).status_code == 200


def post(client: Client, url: str, data: dict[str, Any]) -> Any:
    with use_clock(FakeClock(T0)):
        return client.post(url, data)


def test_create_then_edit_a_run_time_schedule_audited_before_and_after(root_client) -> None:
    created = post(root_client, reverse("admin:django_jobs_schedule_add"), form_data())
    schedule = Schedule.objects.get(tenant="acme", key="acme.report")
    assert created.status_code == 302
    assert created["Location"] == reverse("admin:django_jobs_schedule_change", args=[schedule.pk])
    assert (schedule.origin, schedule.cron, schedule.limit.keep_for) == (
        "runtime",
        "0 6 * * *",
        timedelta(days=30),
    )
    assert AuditRecord.objects.get(action="schedule.created").reason == "new report"

    edit = reverse("admin:django_jobs_schedule_edit", args=[schedule.pk])
    page = root_client.get(reverse("admin:django_jobs_schedule_change", args=[schedule.pk]))
    assert f'href="{edit}" class="jobs-edit"' in page.content.decode()
    shown = root_client.get(edit).content.decode()
    assert 'value="0 6 * * *"' in shown  # the form holds the record
    post(root_client, edit, form_data(cron="30 7 * * 1-5", reason="weekdays only"))

    record = AuditRecord.objects.get(action="schedule.timing_changed")
    assert (record.before, record.after, record.reason) == (
        {"cron": "0 6 * * *"},
        {"cron": "30 7 * * 1-5"},
        "weekdays only",
    )


def test_a_bad_cron_is_refused_with_the_declarations_message(root_client) -> None:
    response = post(
        root_client, reverse("admin:django_jobs_schedule_add"), form_data(cron="61 * * * *")
    )
    page = response.content.decode()
    assert response.status_code == 200
    message = (
        "schedule &#x27;acme.report&#x27;: timing.cron: &#x27;61 * * * *&#x27; "
        "is not a valid cron expression"
    )
    field = page.split('class="form-row field-cron"')[1].split("</div>")[0]
    assert message in field
    assert not Schedule.objects.filter(key="acme.report").exists()


def test_a_local_zone_needs_its_reason_as_a_declaration_does(root_client) -> None:
    response = post(
        root_client,
        reverse("admin:django_jobs_schedule_add"),
        form_data(time_zone="America/New_York", skipped_time="shift", repeated_time="first"),
    )
    assert "timing.reason" in response.content.decode() or "reason" in response.content.decode()
    assert not Schedule.objects.filter(key="acme.report").exists()


def test_a_declared_schedule_is_not_edited_in_the_admin_and_says_where_it_is(root_client) -> None:
    schedule = ScheduleFactory.create(tenant="", key="billing.nightly-statements", origin="code")
    page = root_client.get(reverse("admin:django_jobs_schedule_change", args=[schedule.pk]))
    assert "Declared in code (example_project.billing.schedules)" in page.content.decode()
    assert "jobs-edit" not in page.content.decode()
    response = root_client.get(
        reverse("admin:django_jobs_schedule_edit", args=[schedule.pk]), follow=True
    )
    assert "is declared in code (example_project.billing.schedules)" in response.content.decode()


def test_a_user_without_change_permission_cannot_edit_nor_create() -> None:
    schedule = ScheduleFactory.create(tenant="acme", key="a.runtime", origin="runtime")
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    assign_perm("django_jobs.view_schedule", viewer, schedule)
    client = logged_in(viewer)
    assert (
        client.get(reverse("admin:django_jobs_schedule_edit", args=[schedule.pk])).status_code
        == 403
    )
    assert client.get(reverse("admin:django_jobs_schedule_add")).status_code == 403
    assert post(client, reverse("admin:django_jobs_schedule_add"), form_data()).status_code == 403
    assert Schedule.objects.count() == 1


def test_pause_and_resume_a_tenant_from_the_console(root_client) -> None:
    ScheduleFactory.create(tenant="acme", key="a.one")
    ScheduleFactory.create(tenant="acme", key="a.two")
    url = reverse("admin:django_jobs_tenant")
    response = post(
        root_client, url, {"tenant": "acme", "action": "pause", "reason": "maintenance"}
    )
    assert response.status_code == 302
    assert not Schedule.objects.filter(enabled=True).exists()
    post(root_client, url, {"tenant": "acme", "action": "resume", "reason": "done"})
    assert Schedule.objects.filter(enabled=True).count() == 2
    refused = post(root_client, url, {"tenant": "nobody", "action": "pause", "reason": "x"})
    assert "tenant &#x27;nobody&#x27; has no enabled schedule" in refused.content.decode()


def test_the_app_index_links_the_dashboard(root_client) -> None:
    page = root_client.get(reverse("admin:app_list", args=["django_jobs"])).content.decode()
    assert f'href="{reverse(DASHBOARD)}"' in page


def test_the_dashboard_needs_a_staff_login() -> None:
    response = Client().get(reverse(DASHBOARD))
    assert response.status_code == 302
    assert "/login/" in response["Location"]


def test_cancel_from_the_occurrence_list(root_client) -> None:
    schedule = ScheduleFactory.create(tenant="acme", key="a.one")
    plan(schedule, T0, now=T0)
    occurrence = Occurrence.objects.get()
    with use_clock(FakeClock(T0)):
        root_client.post(
            reverse("admin:django_jobs_occurrence_changelist"),
            {
                "action": "cancel",
                "_selected_action": [occurrence.pk],
                "reason": "no",
                "jobs-confirm": "1",
                "confirm": "1",
            },
        )
    assert Occurrence.objects.get().state == "cancelled"
    assert AuditRecord.objects.get(action="cancel").actor == "root"


def test_the_next_run_of_a_frequent_schedule_is_found_in_its_first_minutes(root_client) -> None:
    """A minutely cron: the next run is looked for in growing windows (upcoming.instants),
    not a year of its instants at once, which the cron evaluation refuses (over 200,000)."""
    ScheduleFactory.create(tenant="acme", key="a.minutely", timing_kind="cron", cron="* * * * *")
    page = dashboard(root_client)
    assert line(page, "acme/a.minutely")[6] == f"{T0:%Y-%m-%d %H:%M:%S} UTC"  # due now
