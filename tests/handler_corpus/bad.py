"""Handlers that do themselves what a job must leave to an application command.

Each name says what the scanner must find in it: ``writes_`` a model write, ``sql_`` SQL,
``http_`` an HTTP call, ``local_time_`` a machine-local or naive time read. None of them is
registered with ``@job`` or ever run: only their source is read.
"""

from __future__ import annotations

import http.client
import time
import urllib.request
from datetime import UTC, date, datetime, timedelta
from http.client import HTTPSConnection as Connection

import django.test
from django.conf import settings
from django.contrib.auth.models import Group
from django.db import connection, connections
from django.db.models.expressions import RawSQL
from django.test import AsyncClient, Client
from django.utils import timezone

from django_jobs import Run
from django_jobs.models import Schedule
from example_project.billing import statements
from example_project.billing.models import Heartbeat, Statement

# A queryset built at import (lazily: no query runs), written through by a handler.
UNSENT = Statement.objects.filter(tenant="")


def _mark_sent(run: Run) -> None:
    Statement.objects.filter(idempotency_key=run.occurrence_key).update(tenant=run.tenant)


def _count_rows() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM billing_statement")
        (count,) = cursor.fetchone() or (0,)
    return int(count)


def _post_to_partner(key: str) -> None:
    Connection("partner.example").request("POST", f"/notify/{key}")


def _today() -> date:
    return date.today()  # noqa: DTZ011


# Model writes ---------------------------------------------------------------------------


def writes_through_a_queryset_chain(run: Run) -> None:
    Statement.objects.filter(tenant=run.tenant).update(tenant="")


def writes_through_a_variable(run: Run) -> None:
    statements_of_tenant = Statement.objects.all()
    statements_of_tenant.update(tenant=run.tenant)


def writes_through_a_narrowed_variable(run: Run) -> None:
    rows = Statement.objects.filter(tenant=run.tenant)
    stale = rows.exclude(for_date=run.scheduled_at.date())
    stale.delete()


def writes_by_saving_an_instance(run: Run) -> None:
    statement = Statement.objects.get(idempotency_key=run.occurrence_key)
    statement.tenant = run.tenant
    statement.save(update_fields=["tenant"])


def writes_by_deleting_an_instance(run: Run) -> None:
    Statement.objects.get(idempotency_key=run.occurrence_key).delete()


def writes_with_bulk_create(run: Run) -> None:
    Heartbeat.objects.bulk_create(
        [Heartbeat(idempotency_key=run.occurrence_key, beat_at=run.scheduled_at)]
    )


def writes_with_bulk_update(run: Run) -> None:
    rows = list(Statement.objects.filter(tenant=""))
    for row in rows:
        row.tenant = run.tenant
    Statement.objects.bulk_update(rows, ["tenant"])


def writes_with_get_or_create(run: Run) -> None:
    Heartbeat.objects.get_or_create(
        idempotency_key=run.occurrence_key, defaults={"beat_at": run.scheduled_at}
    )


def writes_with_update_or_create(run: Run) -> None:
    Heartbeat.objects.update_or_create(
        idempotency_key=run.occurrence_key, defaults={"beat_at": run.scheduled_at}
    )


def writes_through_the_default_manager(run: Run) -> None:
    Statement._default_manager.filter(tenant=run.tenant).delete()


def writes_through_a_related_manager(run: Run) -> None:
    schedule = Schedule.objects.get(key=run.occurrence_key)
    schedule.occurrences.update(tenant=run.tenant)


def writes_through_a_reverse_set(run: Run) -> None:
    Group.objects.get(name=run.tenant).user_set.clear()


def writes_through_a_module_level_queryset(run: Run) -> None:
    UNSENT.update(tenant=run.tenant)


def writes_through_a_helper(run: Run) -> None:
    _mark_sent(run)


async def writes_through_the_async_orm(run: Run) -> None:
    await Statement.objects.filter(tenant=run.tenant).aupdate(tenant="")


async def writes_an_instance_asynchronously(run: Run) -> None:
    statement = await Statement.objects.aget(idempotency_key=run.occurrence_key)
    await statement.adelete()


# SQL ------------------------------------------------------------------------------------


def sql_through_a_cursor(run: Run) -> None:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE billing_statement SET tenant = %s", [run.tenant])


def sql_through_another_database(run: Run) -> None:
    with connections["default"].cursor() as cursor:
        cursor.execute("DELETE FROM billing_heartbeat")


def sql_through_raw(run: Run) -> None:
    rows = list(Statement.objects.raw("SELECT * FROM billing_statement"))
    statements.send_for(rows[0].for_date, idempotency_key=run.occurrence_key)


def sql_through_raw_sql(run: Run) -> None:
    ranked = Statement.objects.annotate(rank=RawSQL("SELECT 1", ()))
    statements.send_for(ranked[0].for_date, idempotency_key=run.occurrence_key)


def sql_through_psycopg(run: Run) -> None:
    import psycopg

    with psycopg.connect("dbname=billing") as conn:
        conn.execute("DELETE FROM billing_heartbeat WHERE idempotency_key = %s", [run.tenant])


def sql_through_a_helper(run: Run) -> None:
    if _count_rows():
        statements.send_for(run.scheduled_at.date(), idempotency_key=run.occurrence_key)


# HTTP -----------------------------------------------------------------------------------


def http_through_the_django_test_client(run: Run) -> None:
    django.test.Client().post("/pay", {"key": run.occurrence_key})


def http_through_an_imported_test_client(run: Run) -> None:
    Client().post("/pay", {"key": run.occurrence_key})


async def http_through_the_async_test_client(run: Run) -> None:
    await AsyncClient().post("/pay", {"key": run.occurrence_key})


def http_through_an_aliased_connection(run: Run) -> None:
    partner = Connection("partner.example")
    partner.request("POST", f"/pay/{run.occurrence_key}")


def http_through_http_client(run: Run) -> None:
    http.client.HTTPSConnection("partner.example").request("GET", "/")


def http_through_urlopen(run: Run) -> None:
    with urllib.request.urlopen("https://partner.example/pay") as response:
        response.read()


def http_through_requests(run: Run) -> None:
    import requests  # type: ignore[import-not-found, import-untyped, unused-ignore]

    requests.Session().get("https://partner.example/pay")


def http_through_an_aliased_httpx_client(run: Run) -> None:
    from httpx import Client as Partner  # type: ignore[import-not-found, import-untyped, unused-ignore]

    with Partner() as partner:
        partner.post("https://partner.example/pay", json={"key": run.occurrence_key})


def http_through_a_helper(run: Run) -> None:
    run.once("notify-partner", lambda: _post_to_partner(run.occurrence_key))


# Local time -----------------------------------------------------------------------------


def local_time_astimezone_without_a_zone(run: Run) -> None:
    day = datetime.now(UTC).astimezone().date()
    statements.send_for(day, idempotency_key=run.occurrence_key)


def local_time_naive_now(run: Run) -> None:
    day = datetime.now().date()  # noqa: DTZ005
    statements.send_for(day, idempotency_key=run.occurrence_key)


def local_time_today(run: Run) -> None:
    statements.send_for(date.today(), idempotency_key=run.occurrence_key)  # noqa: DTZ011


def local_time_from_a_timestamp(run: Run) -> None:
    day = datetime.fromtimestamp(time.time()).date()  # noqa: DTZ006
    statements.send_for(day, idempotency_key=run.occurrence_key)


def local_time_date_from_a_timestamp(run: Run) -> None:
    day = date.fromtimestamp(time.time())  # noqa: DTZ012
    statements.send_for(day, idempotency_key=run.occurrence_key)


def local_time_days_from_time_time(run: Run) -> None:
    day_number = int(time.time() // 86400)
    statements.send_for(date.fromordinal(719163 + day_number), idempotency_key=run.tenant)


def local_time_epoch_arithmetic(run: Run) -> None:
    now = time.time()
    day = (datetime(1970, 1, 1) + timedelta(seconds=now)).date()  # noqa: DTZ001
    statements.send_for(day, idempotency_key=run.occurrence_key)


def local_time_localdate(run: Run) -> None:
    statements.send_for(timezone.localdate(), idempotency_key=run.occurrence_key)


def local_time_from_the_time_zone_setting(run: Run) -> None:
    statements.notify_accountant(run.scheduled_at, idempotency_key=settings.TIME_ZONE)


def local_time_from_the_host_zone_offset(run: Run) -> None:
    shifted = run.scheduled_at - timedelta(seconds=time.timezone)
    statements.send_for(shifted.date(), idempotency_key=run.occurrence_key)


def local_time_through_a_helper(run: Run) -> None:
    statements.send_for(_today(), idempotency_key=run.occurrence_key)
