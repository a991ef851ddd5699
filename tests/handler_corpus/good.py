"""Handlers that dispatch the billing app's commands and do nothing a job must not do.

Some look like what the scanner reports (an ``update()``, a ``delete()``, a clock read,
``astimezone``) without being it: each must yield no finding.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from datetime import UTC, datetime
from http import HTTPStatus
from zoneinfo import ZoneInfo

from asgiref.sync import sync_to_async
from django.core.cache import cache
from django.db.models import Count
from django.utils import timezone

from django_jobs import Run
from example_project.billing import statements
from example_project.billing.models import Statement

logger = logging.getLogger(__name__)
BERLIN = ZoneInfo("Europe/Berlin")


class CommandBus:
    """A stand-in for an application's command bus: ``execute`` here is no SQL."""

    def execute(self, command: str, **arguments: object) -> None:
        logger.info("dispatched %s %s", command, arguments)


bus = CommandBus()


def _send(run: Run) -> None:
    """A helper beside the handlers: it dispatches the command too."""
    with run.atomic():
        statements.send_for(run.scheduled_at.date(), idempotency_key=run.occurrence_key)


def sends_statements(run: Run) -> None:
    with run.atomic():
        statements.send_for(
            run.scheduled_at.date(), idempotency_key=run.occurrence_key, tenant=run.tenant
        )


def beats(run: Run) -> None:
    with run.atomic():
        statements.beat(run.scheduled_at, idempotency_key=run.occurrence_key)


def notifies_once(run: Run) -> None:
    run.raise_if_cancelled()
    run.once(
        "accountant-notified",
        lambda: statements.notify_accountant(run.scheduled_at, idempotency_key=run.occurrence_key),
    )


def merges_options_into_a_dict(run: Run) -> None:
    options = {"tenant": run.tenant}
    options.update({"tenant": run.tenant.strip()})
    with run.atomic():
        statements.send_for(run.scheduled_at.date(), idempotency_key=run.occurrence_key, **options)


def collects_keys_in_a_set(run: Run) -> None:
    seen: set[str] = set()
    seen.update([run.occurrence_key, run.tenant])
    seen.discard("")
    logger.info("keys %s", sorted(seen))
    _send(run)


def sorts_a_list(run: Run) -> None:
    tenants = [run.tenant, "default"]
    tenants.sort()
    for tenant in tenants:
        statements.send_for(
            run.scheduled_at.date(), idempotency_key=f"{run.occurrence_key}:{tenant}"
        )


def uses_the_cache(run: Run) -> None:
    cache.set(f"statements:last:{run.tenant}", run.occurrence_key, 60)
    cache.delete(f"statements:lock:{run.tenant}")
    _send(run)


def logs(run: Run) -> None:
    logger.info("sending statements for %s", run.scheduled_at.isoformat())
    _send(run)


def notes_an_aware_now(run: Run) -> None:
    lag = datetime.now(UTC) - run.scheduled_at
    logger.info("started %s late", lag)
    _send(run)


def notes_an_aware_now_by_keyword(run: Run) -> None:
    logger.info("started at %s", datetime.now(tz=UTC).isoformat())
    _send(run)


def reads_django_now(run: Run) -> None:
    if timezone.now() - run.scheduled_at > run.deadline - run.scheduled_at:
        logger.warning("started after its deadline")
    _send(run)


def works_on_a_berlin_date(run: Run) -> None:
    day = run.scheduled_at.astimezone(ZoneInfo("Europe/Berlin")).date()
    with run.atomic():
        statements.send_for(day, idempotency_key=run.occurrence_key)


def converts_to_a_given_zone(run: Run) -> None:
    zone = BERLIN
    local = run.scheduled_at.astimezone(zone)
    with run.atomic():
        statements.send_for(local.date(), idempotency_key=run.occurrence_key)


def measures_its_duration_with_time_time(run: Run) -> None:
    started = time.time()
    _send(run)
    logger.info("took %.3f s", time.time() - started)


def waits_on_the_monotonic_clock(run: Run) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        run.raise_if_cancelled()
        time.sleep(0.1)
    _send(run)


def builds_a_url_without_calling_it(run: Run) -> None:
    query = urllib.parse.urlencode({"key": run.occurrence_key})
    logger.info("would call ?%s, expecting %s", query, HTTPStatus.OK)
    run.once(
        "notify", lambda: statements.notify_accountant(run.scheduled_at, idempotency_key=query)
    )


def dispatches_through_a_command_bus(run: Run) -> None:
    bus.execute("send-statements", key=run.occurrence_key)


def reads_without_writing(run: Run) -> None:
    pending = Statement.objects.filter(tenant=run.tenant).exclude(tenant="")
    totals = Statement.objects.aggregate(count=Count("id"))
    totals.update({"pending": pending.count()})
    logger.info("statements %s", totals)
    _send(run)


def makes_an_aware_instant_from_time_time(run: Run) -> None:
    now = datetime.fromtimestamp(time.time(), tz=UTC)
    logger.info("clock skew %s", now - timezone.now())
    _send(run)


async def awaits_the_command(run: Run) -> None:
    await sync_to_async(statements.beat)(run.scheduled_at, idempotency_key=run.occurrence_key)


async def commits_through_atomic_async(run: Run) -> None:
    await run.atomic_async(
        lambda: statements.beat(run.scheduled_at, idempotency_key=run.occurrence_key)
    )
