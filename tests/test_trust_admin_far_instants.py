"""Finding 4 of issue #33, the admin's half: a row written behind the service layer (the ORM
here) with an instant at either end of what PostgreSQL and Python hold, 9999-12-31 23:59:59
or 0001-01-01 00:00 UTC, breaks no page of the admin or the console, whatever Django's
``TIME_ZONE``: every instant is shown in UTC, and said to be."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import override_settings
from django.urls import reverse

from django_jobs.models import Attempt, AuditRecord, Occurrence, Replica, Schedule
from django_jobs.scheduling.policies import TimingKind

from .factories import T0, ScheduleFactory, dead_occurrence
from .storeutil import plan

pytestmark = pytest.mark.django_db

LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
EARLIEST = datetime(1, 1, 1, 0, 0, tzinfo=UTC)
# East of UTC: an instant near the end of year 9999 is in year 10000 there; west of UTC, one
# at the start of year 1 is in year 0. Neither is a Python datetime.
ZONES = ["Asia/Tokyo", "America/New_York"]


@pytest.fixture(params=[LATEST, EARLIEST], ids=["9999-12-31", "0001-01-01"])
def far(request) -> datetime:
    instant: datetime = request.param
    return instant


@pytest.fixture
def rows(far) -> dict[str, object]:
    """Every kind of row the admin shows, each with ``far`` in its instants: a one-off at
    ``far`` (its next run and recovery points too), its occurrence there, a dead occurrence
    moved there, an audit record, a replica's heartbeat."""
    one_off = ScheduleFactory.create(
        tenant="acme",
        key="far.one-off",
        timing_kind=TimingKind.AT,
        interval=None,
        anchor=None,
        run_at=far,
    )
    plan(one_off, T0, now=T0)
    Occurrence.objects.filter(schedule=one_off).update(scheduled_at=far, due_at=far)
    Schedule.objects.filter(pk=one_off.pk).update(
        next_due_at=far, last_scheduled_at=far, disabled_at=far, created_at=far, updated_at=far
    )
    other = ScheduleFactory.create(tenant="acme", key="far.dead")
    dead = dead_occurrence(other)
    Occurrence.objects.filter(pk=dead.pk).update(
        scheduled_at=far, due_at=far, started_at=far, finished_at=far
    )
    Attempt.objects.filter(occurrence=dead).update(started_at=far, finished_at=far)
    record = AuditRecord.objects.create(
        at=far,
        actor="root",
        action="disable",
        tenant="acme",
        schedule_id=one_off.pk,
        target_type="schedule",
        target_id=str(one_off.pk),
        reason="far",
    )
    replica = Replica.objects.create(
        id="far-replica", host="h", pid=1, started_at=far, heartbeat_at=far, state="running"
    )
    occurrence = Occurrence.objects.get(schedule=one_off)
    return {
        "one_off": one_off,
        "occurrence": occurrence,
        "dead": dead,
        "record": record,
        "replica": replica,
    }


def pages(rows) -> list[str]:
    one_off, occurrence, dead = rows["one_off"], rows["occurrence"], rows["dead"]
    return [
        reverse("admin:django_jobs_schedule_changelist"),
        reverse("admin:django_jobs_schedule_change", args=[one_off.pk]),
        reverse("admin:django_jobs_schedule_edit", args=[one_off.pk]),
        reverse("admin:django_jobs_occurrence_changelist"),
        reverse("admin:django_jobs_occurrence_changelist") + "?dead=yes",
        reverse("admin:django_jobs_occurrence_change", args=[occurrence.pk]),
        reverse("admin:django_jobs_occurrence_change", args=[dead.pk]),
        reverse("admin:django_jobs_auditrecord_changelist"),
        reverse("admin:django_jobs_auditrecord_change", args=[rows["record"].pk]),
        reverse("admin:django_jobs_replica_changelist"),
        reverse("admin:django_jobs_replica_change", args=[rows["replica"].pk]),
        reverse("admin:django_jobs_runbook_changelist"),
        reverse("admin:django_jobs_dashboard"),
        reverse("admin:django_jobs_tenant"),
        reverse("admin:index"),
    ]


@pytest.mark.parametrize("zone", ZONES)
def test_no_page_fails_on_a_far_instant_under_any_time_zone(root_client, rows, zone) -> None:
    root_client.raise_request_exception = False  # a failing page is reported as its 500
    with override_settings(TIME_ZONE=zone):
        answered = {page: root_client.get(page).status_code for page in pages(rows)}
    assert answered == dict.fromkeys(pages(rows), 200)


@pytest.mark.parametrize("zone", ZONES)
def test_each_page_shows_the_far_instant_in_utc(root_client, rows, far, zone) -> None:
    shown = far.replace(tzinfo=None).isoformat(sep=" ") + " UTC"
    one_off, occurrence = rows["one_off"], rows["occurrence"]
    with override_settings(TIME_ZONE=zone):
        for page in [
            reverse("admin:django_jobs_schedule_changelist"),  # its next run
            reverse("admin:django_jobs_schedule_change", args=[one_off.pk]),
            reverse("admin:django_jobs_occurrence_changelist"),
            reverse("admin:django_jobs_occurrence_changelist") + "?dead=yes",
            reverse("admin:django_jobs_occurrence_change", args=[occurrence.pk]),
            reverse("admin:django_jobs_occurrence_change", args=[rows["dead"].pk]),
            reverse("admin:django_jobs_auditrecord_changelist"),
            reverse("admin:django_jobs_replica_changelist"),
        ]:
            assert shown in root_client.get(page).content.decode(), page
        # The schedule page's audit trail (a template: the same formatting, a filter).
        page = root_client.get(reverse("admin:django_jobs_schedule_change", args=[one_off.pk]))
        assert f"{shown} root disable: far" in page.content.decode()


@pytest.mark.parametrize("zone", ZONES)
def test_a_schedule_at_a_far_instant_can_be_disabled_from_the_admin(
    root_client, rows, zone
) -> None:
    one_off = rows["one_off"]
    changelist = reverse("admin:django_jobs_schedule_changelist")
    chosen = {"action": "disable_schedules", "_selected_action": [one_off.pk]}
    with override_settings(TIME_ZONE=zone):
        asked = root_client.get(reverse("admin:django_jobs_schedule_change", args=[one_off.pk]))
        assert asked.status_code == 200
        confirm = root_client.post(changelist, chosen)
        assert confirm.status_code == 200
        assert "Yes, disable schedules" in confirm.content.decode()
        done = root_client.post(
            changelist, {**chosen, "confirm": "yes", "reason": "far"}, follow=True
        )
    assert done.status_code == 200
    assert f"Disabled {one_off}." in done.content.decode()
    assert Schedule.objects.get(pk=one_off.pk).enabled is False
