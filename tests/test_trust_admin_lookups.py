"""Finding 3 of issue #33: a value the admin shows as ``[redacted]`` could be read back through
the lists' query strings. Django's ChangeList applies any lookup on the model's own fields
(``?args__api_token__startswith=f``): the row is listed or not, and a view-only user recovered
a token one character at a time from the schedule, occurrence and audit lists. Now every
django_jobs list takes only its declared filters' parameters; anything else is a 400."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.urls import reverse

from django_jobs import runbooks
from django_jobs.models import AuditRecord, Occurrence, Replica
from django_jobs.permissions import grant_tenant

from .factories import T0, ScheduleFactory, dead_occurrence
from .storeutil import plan

pytestmark = pytest.mark.django_db

# A secret the pages show redacted; hex, so that an attack tries 16 characters a position.
TOKEN = "f00d"
ALPHABET = "0123456789abcdef"
REDACTED = "[redacted]"

LISTS = {
    "schedules": "admin:django_jobs_schedule_changelist",
    "occurrences": "admin:django_jobs_occurrence_changelist",
    "audit": "admin:django_jobs_auditrecord_changelist",
    "replicas": "admin:django_jobs_replica_changelist",
    "runbooks": "admin:django_jobs_runbook_changelist",
}


@pytest.fixture
def rows() -> dict[str, object]:
    """acme's schedule with a token among its arguments, its occurrence carrying it in its
    arguments and result, a dead letter, an audit record of a run-now with it, a
    replica and the schedule's runbooks."""
    secret = {"api_token": TOKEN, "region": "eu"}
    acme = ScheduleFactory.create(tenant="acme", key="billing.nightly", args=secret)
    runbooks.write(acme)
    plan(acme, T0, now=T0)
    Occurrence.objects.filter(schedule=acme).update(result=secret)
    dead_occurrence(acme, T0 - timedelta(days=1))
    record = AuditRecord.objects.create(
        at=T0,
        actor="root",
        action="run_now",
        tenant="acme",
        schedule_id=acme.pk,
        target_type="schedule",
        target_id=str(acme.pk),
        reason="by hand",
        after={"args": secret},
    )
    Replica.objects.create(
        id="r1", host="h", pid=1, started_at=T0, heartbeat_at=T0, state="running"
    )
    return {
        "schedule": acme,
        "occurrence": Occurrence.objects.get(schedule=acme, scheduled_at=T0),
        "record": record,
    }


@pytest.fixture
def viewer(rows) -> Client:
    """Staff who may only view: tenant acme's schedules (a tenant grant) and the replicas."""
    user = User.objects.create_user("vera", password="pw", is_staff=True)
    group = Group.objects.create(name="acme-viewers")
    user.groups.add(group)
    grant_tenant(group, "acme", "view")
    user.user_permissions.add(Permission.objects.get(codename="view_replica"))
    client = Client()
    client.force_login(user)
    return client


def change_link(obj) -> str:
    return reverse(f"admin:django_jobs_{obj._meta.model_name}_change", args=[obj.pk])


def recover(client: Client, page: str, lookup: str, row: str) -> tuple[str, set[int]]:
    """The attack: extend a guessed prefix by the character for which the list still shows
    ``row``. What was recovered, and every status the list answered."""
    known, statuses = "", set()
    while True:
        for char in ALPHABET:
            response = client.get(f"{page}?{urlencode({lookup: known + char})}")
            statuses.add(response.status_code)
            if response.status_code == 200 and row in response.content.decode():
                known += char
                break
        else:
            return known, statuses


@pytest.mark.parametrize(
    ("name", "lookup", "target"),
    [
        ("schedules", "args__api_token__startswith", "schedule"),
        ("occurrences", "args__api_token__startswith", "occurrence"),
        ("occurrences", "result__api_token__startswith", "occurrence"),
        ("audit", "after__args__api_token__startswith", "record"),
    ],
)
def test_a_view_only_user_cannot_read_a_redacted_value_back_character_by_character(
    viewer, rows, name, lookup, target
) -> None:
    page = reverse(LISTS[name])
    row = change_link(rows[target])
    # What the pages show: the row, its value redacted.
    assert row in viewer.get(page).content.decode()
    shown = viewer.get(row).content.decode()
    assert REDACTED in shown
    assert TOKEN not in shown
    recovered, statuses = recover(viewer, page, lookup, row)
    assert recovered == ""
    assert statuses == {400}


HOSTILE = [
    "args__api_token__startswith=f",
    "args__api_token=f00d",
    "result__api_token__startswith=f",
    "after__args__api_token__startswith=f",
    "before__args__api_token__startswith=f",
    "last_error_message__regex=^api",
    "schedule__args__api_token__startswith=f",
    "disabled_reason__icontains=x",
    "reason__icontains=by",
    "id__gt=0",
    "tenant__regex=.",  # on a field a filter names, but no parameter of that filter
    "status__exact=active&status__regex=.",
    "dead=yes&args__api_token__startswith=f",
    "nonexistent_field=1",
]


@pytest.mark.parametrize("name", sorted(LISTS))
def test_every_list_refuses_a_lookup_that_is_no_declared_filter(viewer, name) -> None:
    page = reverse(LISTS[name])
    answered = {query: viewer.get(f"{page}?{query}").status_code for query in HOSTILE}
    assert answered == dict.fromkeys(HOSTILE, 400)


@pytest.mark.parametrize("name", sorted(LISTS))
def test_every_filter_a_list_offers_still_works(viewer, name) -> None:
    page = reverse(LISTS[name])
    body = viewer.get(page).content.decode()
    panel = body.split('id="changelist-filter"', 1)[-1] if "changelist-filter" in body else ""
    links = set(re.findall(r'href="(\?[^"]*)"', panel))
    for link in links:
        response = viewer.get(page + link.replace("&amp;", "&"))
        assert response.status_code == 200, (name, link, response.status_code)


def test_the_parameters_pages_link_to_and_the_docs_name_are_declared(viewer, rows) -> None:
    acme, occurrence = rows["schedule"], rows["occurrence"]
    occurrences = reverse(LISTS["occurrences"])
    since = urlencode(
        {"scheduled_at__gte": T0.isoformat(), "scheduled_at__lt": (T0 + timedelta(1)).isoformat()}
    )
    for query in [
        f"dead=yes&schedule__id__exact={acme.pk}",  # the dashboard's dead letters
        f"schedule__id__exact={acme.pk}",  # a schedule's page
        since,  # docs/operations.md: any range
        "state__exact=dead",
        "trigger__exact=manual",
        "tenant=acme",
        "scheduled=7d",
        f"q={occurrence.pk}",
        "o=1",
        "p=1",
        "e=1",
        "all=",
        "_facets=1",
    ]:
        response = viewer.get(f"{occurrences}?{query}")
        assert response.status_code == 200, query
    audit = reverse(LISTS["audit"])
    for query in [f"schedule_id__exact={acme.pk}", "action=run_now", "tenant=acme", "q=hand"]:
        response = viewer.get(f"{audit}?{query}")
        assert response.status_code == 200, query
        assert change_link(rows["record"]) in response.content.decode()
    schedules = reverse(LISTS["schedules"])
    for query in ["status__exact=active", "enabled__exact=1", "tenant=acme", "q=billing"]:
        response = viewer.get(f"{schedules}?{query}")
        assert response.status_code == 200, query
        assert change_link(acme) in response.content.decode()
