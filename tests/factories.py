"""Test data: factory-boy factories for rows, makers of records in a given state, and the
job registry and retention pass that age records the way a replica does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import factory.declarations
import factory.django

from django_jobs import cron, schedule, store
from django_jobs.conf import get_settings
from django_jobs.declarations import Declaration
from django_jobs.models import Occurrence, Schedule, ScheduleStatus
from django_jobs.registry import Registry
from django_jobs.safe_error import SafeError
from django_jobs.scheduling.policies import TimingKind
from django_jobs.testing import FakeClock
from django_jobs.worker import retention

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


OWNERS: dict[str, Any] = {"operating_owner": "team-billing", "record_owner": "ops@example.com"}
# A project's DJANGO_JOBS["DEFAULTS"]: what the minimal declaration leaves out (issue #35).
RECORD_DEFAULTS: dict[str, Any] = {
    "operating_owner": "orders-team",
    "record_owner": "orders-lead",
    "status": "active",
    "retention": timedelta(days=30),
}


def declaration(key: str = "billing.nightly", **fields: Any) -> Declaration:
    """A complete, valid declaration (not registered), with ``fields`` changed."""
    base: dict[str, Any] = dict(
        job="billing.send_statements",
        timing=cron(
            "0 9 * * *",
            zone="America/New_York",
            skipped="shift",
            repeated="first",
            reason="statements at 09:00 for readers in New York",
        ),
        retention=timedelta(days=90),
        status="active",
        register=False,
        **OWNERS,
    )
    return schedule(key, **{**base, **fields})


def dead_occurrence(
    schedule: Schedule, at: datetime = T0, *, message: str = "boom", owner: str = "w"
) -> Occurrence:
    """The occurrence of ``schedule`` due at ``at``, dead after one failed attempt.

    Made the way a worker makes one (planned, claimed by ``owner``, dead-lettered with a
    ``RuntimeError`` saying ``message``), so its attempt and lease columns are real.
    """
    # Imported here: the store helpers may build their rows with the factories above.
    from .storeutil import claim, plan

    plan(schedule, at, now=at)
    (lease,) = claim(owner, at)
    store.dead_letter(lease, now=at, error=SafeError("RuntimeError", message))
    return Occurrence.objects.get(schedule=schedule, scheduled_at=at)


def jobs_with_steps() -> Registry:
    """``tests.stepped`` records one ``run.once`` step per run, like the example's digest."""
    jobs = Registry()
    jobs.register("tests.stepped", lambda run: run.once("send", lambda: None))
    return jobs


def retention_pass(clock: FakeClock) -> retention.RetentionPass:
    """One pass on the test's connection (nobody else holds the retention lock)."""
    done = retention.run_pass(replica="test", clock=clock, settings=get_settings())
    assert done is not None
    return done
