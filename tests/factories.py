from __future__ import annotations

from datetime import UTC, datetime, timedelta

import factory.declarations
import factory.django

from django_jobs.models import Schedule, ScheduleStatus
from django_jobs.scheduling.policies import TimingKind

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class ScheduleFactory(factory.django.DjangoModelFactory[Schedule]):
    class Meta:
        model = Schedule

    key = factory.declarations.Sequence(lambda n: f"tests.schedule-{n}")
    job = "tests.noop"
    timing_kind = TimingKind.INTERVAL
    interval = timedelta(minutes=1)
    anchor = T0
    # Store tests exercise leases, not policies: runs may overlap and start late. The policy
    # tests set overlap and max_delay explicitly.
    overlap = "allow"
    max_delay = timedelta(days=365)
    origin = "runtime"  # not declared in code, so a sync leaves it alone
    operating_owner = "team-tests"
    record_owner = "tests@example.com"
    status = ScheduleStatus.ACTIVE
    created_at = T0
    updated_at = T0
