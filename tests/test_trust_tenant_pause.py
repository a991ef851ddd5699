"""Issue #33, finding 6: resuming a tenant undoes only its pause.

A pause marks the schedules it disables (``Schedule.paused_by_tenant``); a resume enables
only those. A schedule an operator disabled on their own stays disabled, whatever its reason
says (``tenant paused: ...`` is text anyone who disables a schedule can write), and so does
one an operator disabled again during the pause.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from django_jobs import services
from django_jobs.exceptions import JobsError
from django_jobs.models import AuditRecord, Schedule
from django_jobs.testing import FakeClock, use_clock

from .factories import T0, ScheduleFactory

pytestmark = pytest.mark.django_db

LATER = T0 + timedelta(hours=1)


def enabled() -> dict[str, bool]:
    return dict(Schedule.objects.values_list("key", "enabled"))


def test_a_schedule_disabled_with_a_pause_like_reason_before_the_pause_stays_disabled(
    root,
) -> None:
    """The reason's text is not the mark: an operator's own disable reading ``tenant paused:
    ...`` was re-enabled by the resume."""
    ScheduleFactory.create(tenant="acme", key="a.nightly")
    broken = ScheduleFactory.create(tenant="acme", key="a.broken")
    services.disable(broken, actor=root, reason="tenant paused: fix pending (#412)", now=T0)

    services.pause_tenant("acme", actor=root, reason="migration", now=T0)
    resumed = services.resume_tenant("acme", actor=root, reason="done", now=LATER)

    assert [s.key for s in resumed] == ["a.nightly"]
    assert enabled() == {"a.nightly": True, "a.broken": False}
    row = Schedule.objects.get(key="a.broken")
    assert row.disabled_reason == "tenant paused: fix pending (#412)"
    assert not AuditRecord.objects.filter(schedule_id=broken.pk, action="enable").exists()


def test_a_schedule_an_operator_disables_during_the_pause_stays_disabled(root) -> None:
    ScheduleFactory.create(tenant="acme", key="a.nightly")
    hourly = ScheduleFactory.create(tenant="acme", key="a.hourly")
    services.pause_tenant("acme", actor=root, reason="migration", now=T0)

    services.disable(hourly, actor=root, reason="the export is wrong", now=T0)
    services.resume_tenant("acme", actor=root, reason="done", now=LATER)

    assert enabled() == {"a.nightly": True, "a.hourly": False}
    row = Schedule.objects.get(key="a.hourly")
    assert not row.paused_by_tenant
    repeated = AuditRecord.objects.get(schedule_id=hourly.pk, action="disable.repeated")
    assert repeated.before["paused_by_tenant"] is True
    assert "paused_by_tenant" not in repeated.after


def test_the_pause_marks_what_it_disables_and_the_resume_clears_the_mark(root) -> None:
    nightly = ScheduleFactory.create(tenant="acme", key="a.nightly")
    services.pause_tenant("acme", actor=root, reason="migration", now=T0)

    assert Schedule.objects.get(pk=nightly.pk).paused_by_tenant
    disabled = AuditRecord.objects.get(schedule_id=nightly.pk, action="disable")
    assert disabled.after["paused_by_tenant"] is True
    assert disabled.reason == "tenant paused: migration"

    services.resume_tenant("acme", actor=root, reason="done", now=LATER)
    row = Schedule.objects.get(pk=nightly.pk)
    assert (row.enabled, row.paused_by_tenant) == (True, False)
    enabled_record = AuditRecord.objects.get(schedule_id=nightly.pk, action="enable")
    assert enabled_record.before["paused_by_tenant"] is True


def test_an_explicit_enable_during_the_pause_clears_the_mark(root) -> None:
    """Enabled on its own and disabled again by an operator: not the pause's any more."""
    nightly = ScheduleFactory.create(tenant="acme", key="a.nightly")
    ScheduleFactory.create(tenant="acme", key="a.hourly")
    services.pause_tenant("acme", actor=root, reason="migration", now=T0)
    services.enable(nightly, actor=root, reason="needed tonight", now=T0)
    assert not Schedule.objects.get(pk=nightly.pk).paused_by_tenant
    services.disable(nightly, actor=root, reason="tenant paused: by hand", now=T0)

    services.resume_tenant("acme", actor=root, reason="done", now=LATER)

    assert enabled() == {"a.nightly": False, "a.hourly": True}


def test_a_resume_with_nothing_the_pause_disabled_is_refused(root) -> None:
    lone = ScheduleFactory.create(tenant="acme", key="a.lone")
    services.disable(lone, actor=root, reason="tenant paused: forged", now=T0)
    with pytest.raises(JobsError, match="tenant 'acme' has no paused schedule"):
        services.resume_tenant("acme", actor=root, reason="done", now=LATER)
    assert enabled() == {"a.lone": False}


def post(client: Client, url: str, data: dict[str, Any]) -> Any:
    with use_clock(FakeClock(T0)):
        return client.post(url, data)


def test_through_the_admin_a_disable_during_the_pause_survives_the_resume(root) -> None:
    """The console's tenant page and the schedule list's disable action, as an operator
    uses them."""
    ScheduleFactory.create(tenant="acme", key="a.nightly")
    hourly = ScheduleFactory.create(tenant="acme", key="a.hourly")
    client = Client()
    client.force_login(root)
    tenant_page = reverse("admin:django_jobs_tenant")

    paused = post(client, tenant_page, {"tenant": "acme", "action": "pause", "reason": "move"})
    assert paused.status_code == 302
    action = {
        "action": "disable_schedules",
        "_selected_action": [hourly.pk],
        "confirm": "yes",
        "reason": "tenant paused: and keep it off",
    }
    post(client, reverse("admin:django_jobs_schedule_changelist"), action)
    resumed = post(client, tenant_page, {"tenant": "acme", "action": "resume", "reason": "done"})

    assert resumed.status_code == 302
    assert enabled() == {"a.nightly": True, "a.hourly": False}
