"""The overlap check of a claim (issue #38): for each row of a skip/queue schedule it takes,
whether another occurrence of that schedule is processing, one probe of that schedule's
entries in django_jobs_occurrence_holding. Planned on django_jobs_occurrence_running (queue,
lease_expires_at) filtered by schedule instead, every probe read every processing entry, and
a burst's dead ones: 16 of a 26 ms claim of 24 rows (docs/performance.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from .factories import T0, ScheduleFactory
from .storeutil import LEASE, claim, explain_claim, plan

pytestmark = pytest.mark.django_db

NOW = T0 + timedelta(seconds=1)


def _processing_rows(schedule_pk: int, count: int) -> None:
    """``count`` occurrences of ``schedule_pk`` processing under live leases; statistics
    refreshed."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_jobs_occurrence (id, schedule_id, tenant, scheduled_at, state,"
            " skip_reason, trigger, due_at, lease_owner, lease_expires_at, fencing_token,"
            " attempts, failures, last_error_type, last_error_message, queue)"
            " SELECT gen_random_uuid(), %s, '', %s - make_interval(secs => g), 'processing',"
            " '', 'schedule', %s, 'busy', %s, g, 1, 0, '', '', 'default'"
            " FROM generate_series(1, %s) g",
            [schedule_pk, T0, NOW + LEASE, NOW + LEASE, count],
        )
        cursor.execute("ANALYZE django_jobs_occurrence")


def test_the_overlap_check_probes_only_the_schedules_own_processing_rows() -> None:
    """The plan, not timing: 5,000 occurrences of other schedules processing are not read."""
    busy = ScheduleFactory.create(overlap="allow")
    _processing_rows(busy.pk, 5000)
    guarded = ScheduleFactory.create(overlap="skip")
    plan(guarded, T0, now=T0)
    explained = explain_claim(NOW, limit=24)
    assert "using django_jobs_occurrence_holding" in explained, explained
    assert "using django_jobs_occurrence_running" not in explained, explained
    (lease,) = claim("r1", NOW, limit=24)
    assert lease.schedule_id == guarded.pk
