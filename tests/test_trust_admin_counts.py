"""Finding 11 of issue #33, the admin's lists: no page load reads a whole table. The Audit list
counted the whole never-purged audit table (``COUNT(*)``) and ran a ``SELECT DISTINCT`` over it
for each of its two filters (action, tenant) on every load; the other lists but occurrences
counted theirs exactly too. Now every list's count is PostgreSQL's estimate when large and a
count bounded by a LIMIT when small, and the audit filters read no more than a bounded sample."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_jobs import runbooks
from django_jobs.models import AuditRecord, Replica
from django_jobs.permissions import grant_tenant

from .factories import T0, ScheduleFactory, dead_occurrence
from .storeutil import plan

pytestmark = pytest.mark.django_db

# More rows than admin_lists.EXACT_COUNT_BELOW: a list this long is never counted exactly.
MANY = 12_000
AUDIT = "django_jobs_auditrecord"

LISTS = {
    "schedules": "admin:django_jobs_schedule_changelist",
    "occurrences": "admin:django_jobs_occurrence_changelist",
    "audit": "admin:django_jobs_auditrecord_changelist",
    "replicas": "admin:django_jobs_replica_changelist",
    "runbooks": "admin:django_jobs_runbook_changelist",
}


@pytest.fixture
def acme():
    acme = ScheduleFactory.create(tenant="acme", key="billing.nightly")
    runbooks.write(acme)
    plan(acme, T0, now=T0)
    dead_occurrence(acme, T0 - timedelta(days=1))
    Replica.objects.create(
        id="r1", host="h", pid=1, started_at=T0, heartbeat_at=T0, state="running"
    )
    return acme


@pytest.fixture
def audit_rows(acme) -> None:
    """``MANY`` audit records over two tenants and five actions, as years of operation leave
    them, and the planner's statistics of the table."""
    actions = ["disable", "enable", "run_now", "replay", "schedule.changed"]
    AuditRecord.objects.bulk_create(
        AuditRecord(
            at=T0 + timedelta(seconds=i),
            actor="root",
            action=actions[i % len(actions)],
            tenant="acme" if i % 2 else "globex",
            schedule_id=acme.pk if i % 2 else None,
            target_type="schedule",
            target_id=str(acme.pk),
            reason=f"record {i}",
        )
        for i in range(MANY)
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {AUDIT}")


@pytest.fixture
def viewer(acme) -> Client:
    """Staff who may view tenant acme (a tenant grant) and the replicas."""
    user = User.objects.create_user("vera", password="pw", is_staff=True)
    group = Group.objects.create(name="acme-viewers")
    user.groups.add(group)
    grant_tenant(group, "acme", "view")
    user.user_permissions.add(Permission.objects.get(codename="view_replica"))
    client = Client()
    client.force_login(user)
    return client


def loaded(client: Client, page: str) -> tuple[str, list[str]]:
    """The page's text and every SQL statement its load ran."""
    with CaptureQueriesContext(connection) as queries:
        response = client.get(page)
    assert response.status_code == 200, (page, response.status_code)
    return response.content.decode(), [q["sql"] for q in queries.captured_queries]


def unbounded_counts(statements: list[str]) -> list[str]:
    return [s for s in statements if "COUNT(" in s.upper() and "LIMIT" not in s.upper()]


@pytest.mark.parametrize("user", ["root_client", "viewer"])
def test_the_audit_list_neither_counts_nor_scans_the_audit_table(request, audit_rows, user):
    client = request.getfixturevalue(user)
    for query in ["", "?_facets=1", "?action=disable", "?tenant=acme", "?p=2"]:
        _, statements = loaded(client, reverse(LISTS["audit"]) + query)
        over_audit = [s for s in statements if AUDIT in s]
        assert over_audit, statements
        assert unbounded_counts(over_audit) == [], query
        assert [s for s in over_audit if "DISTINCT" in s.upper()] == [], query
        # Each statement over the table is the planner's estimate or a bounded read.
        unbounded = [s for s in over_audit if not s.startswith("EXPLAIN") and "LIMIT" not in s]
        assert unbounded == [], query


def test_the_whole_audit_list_shows_the_planners_estimate(root_client, audit_rows) -> None:
    page, _ = loaded(root_client, reverse(LISTS["audit"]))
    assert re.search(r"about \d+ audit records", page)


def test_the_audit_filters_offer_the_actions_and_tenants_without_reading_the_table(
    root_client, audit_rows
) -> None:
    page, _ = loaded(root_client, reverse(LISTS["audit"]))
    panel = page.split('id="changelist-filter"', 1)[1]
    for action in ["disable", "enable", "run_now", "replay", "schedule.changed"]:
        assert f"?action={action}" in panel
    assert "?tenant=acme" in panel


@pytest.mark.parametrize("name", sorted(LISTS))
@pytest.mark.parametrize("user", ["root_client", "viewer"])
def test_no_list_counts_its_rows_without_a_bound(request, acme, name, user) -> None:
    client = request.getfixturevalue(user)
    for query in ["", "?_facets=1"]:
        _, statements = loaded(client, reverse(LISTS[name]) + query)
        assert unbounded_counts(statements) == [], (name, query)
