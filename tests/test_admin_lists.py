"""The admin's occurrences list: newest first, its filters and search, scoped by permission,
and a count that is PostgreSQL's estimate when the list is large (django_jobs.admin_lists)."""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from guardian.shortcuts import assign_perm

from django_jobs import admin_lists, store
from django_jobs.admin import OccurrenceAdmin
from django_jobs.models import Occurrence, Schedule, Trigger
from django_jobs.testing import FakeClock, use_clock

from .factories import T0, ScheduleFactory, dead_occurrence
from .storeutil import plan, planned

pytestmark = pytest.mark.django_db

LIST = "admin:django_jobs_occurrence_changelist"
ROW = re.compile(r"/admin/django_jobs/occurrence/([0-9a-f-]{36})/change/")


@pytest.fixture
def schedules() -> tuple[Schedule, Schedule]:
    acme = ScheduleFactory.create(tenant="acme", key="billing.nightly")
    globex = ScheduleFactory.create(tenant="globex", key="reports.weekly")
    return acme, globex


@pytest.fixture
def rows(schedules) -> dict[str, Occurrence]:
    """Occurrences of both schedules, planned out of order: acme at +1, +3 and +2 minutes (the
    +2 one a replay), globex at +4 (planned ahead of the clock below), and acme's dead one at
    -1 day."""
    acme, globex = schedules
    plan(acme, T0 + timedelta(minutes=1), T0 + timedelta(minutes=3), now=T0)
    (replayed,) = planned(acme, T0 + timedelta(minutes=2))
    store.plan([dataclasses.replace(replayed, trigger=Trigger.MANUAL)], now=T0)
    plan(globex, T0 + timedelta(minutes=4), now=T0)
    dead = dead_occurrence(acme, T0 - timedelta(days=1))
    found = {
        f"{o.schedule.tenant}+{int((o.scheduled_at - T0).total_seconds() // 60)}": o
        for o in Occurrence.objects.select_related("schedule")
    }
    found["dead"] = dead
    return found


@pytest.fixture
def alice(schedules) -> Client:
    """Staff with the object permission to view acme's schedule only."""
    user = User.objects.create_user("alice", password="pw", is_staff=True)
    assign_perm("django_jobs.view_schedule", user, schedules[0])
    client = Client()
    client.force_login(user)
    return client


def listed(client: Client, query: str = "") -> list[str]:
    """The ids of the occurrences the list shows, in its order."""
    response = client.get(reverse(LIST) + query)
    assert response.status_code == 200, response
    ids = ROW.findall(response.content.decode())
    return list(dict.fromkeys(ids))


def ids(rows: dict[str, Occurrence], *names: str) -> list[str]:
    return [str(rows[name].pk) for name in names]


def test_the_list_is_newest_first(root_client, rows) -> None:
    assert listed(root_client) == ids(rows, "globex+4", "acme+3", "acme+2", "acme+1", "dead")


def test_each_filter_gives_its_rows(root_client, rows, schedules) -> None:
    _, globex = schedules
    assert listed(root_client, "?state__exact=dead") == ids(rows, "dead")
    assert listed(root_client, "?dead=yes") == ids(rows, "dead")
    assert listed(root_client, "?trigger__exact=manual") == ids(rows, "acme+2")
    assert listed(root_client, f"?schedule__id__exact={globex.pk}") == ids(rows, "globex+4")
    assert listed(root_client, "?tenant=globex") == ids(rows, "globex+4")
    assert listed(root_client, "?tenant=acme&state__exact=scheduled") == ids(
        rows, "acme+3", "acme+2", "acme+1"
    )


def test_the_date_filter_is_a_range_from_the_injected_now(root_client, rows) -> None:
    with use_clock(FakeClock(T0 + timedelta(minutes=3, seconds=30))):
        assert listed(root_client, "?scheduled=1h") == ids(rows, "acme+3", "acme+2", "acme+1")
        assert listed(root_client, "?scheduled=ahead") == ids(rows, "globex+4")
        assert listed(root_client, "?scheduled=7d") == ids(
            rows, "acme+3", "acme+2", "acme+1", "dead"
        )
        # UTC's day and month (1 March): the dead one, on 28 February, is in neither.
        today = ids(rows, "globex+4", "acme+3", "acme+2", "acme+1")
        assert listed(root_client, "?scheduled=today") == today
        assert listed(root_client, "?scheduled=month") == today
    since = urlencode({"scheduled_at__gte": (T0 + timedelta(minutes=3)).isoformat()})
    assert listed(root_client, f"?{since}") == ids(rows, "globex+4", "acme+3")


@override_settings(TIME_ZONE="Asia/Tokyo")
def test_a_range_bound_without_an_offset_is_read_as_utc_not_in_the_configured_zone(
    root_client, rows
) -> None:
    """Nine hours east, 12:02:30 would be 03:02:30 UTC: the dead one alone."""
    before = ids(rows, "acme+2", "acme+1", "dead")
    assert listed(root_client, "?scheduled_at__lt=2026-03-01T12:02:30") == before
    assert listed(root_client, "?scheduled_at__lt=2026-03-01T21:02:30%2B09:00") == before
    assert listed(root_client, "?scheduled_at__gte=2026-03-01") == ids(
        rows, "globex+4", "acme+3", "acme+2", "acme+1"
    )
    response = root_client.get(
        reverse("admin:django_jobs_occurrence_changelist") + "?scheduled_at__gte=x"
    )
    assert response.status_code == 302
    assert response.url.endswith("?e=1")


def test_search_by_id_is_exact_and_by_key_matches_a_part(root_client, rows) -> None:
    assert listed(root_client, f"?q={rows['acme+2'].pk}") == ids(rows, "acme+2")
    assert listed(root_client, "?q=weekly") == ids(rows, "globex+4")
    assert listed(root_client, "?q=acme/billing") == ids(rows, "acme+3", "acme+2", "acme+1", "dead")
    # A part of an id is no id: it is searched as a key, and matches nothing.
    assert listed(root_client, f"?q={str(rows['acme+2'].pk)[:8]}") == []


def test_a_bad_id_or_filter_value_is_refused_without_an_error(root_client, rows) -> None:
    assert listed(root_client, "?q=not-a-uuid-0000") == []
    for query in ("?schedule__id__exact=abc", "?scheduled=yesterday"):
        response = root_client.get(reverse(LIST) + query)
        assert response.status_code == 302, query
        assert response["Location"].endswith("?e=1")


def test_a_scoped_user_sees_only_their_schedules_occurrences(alice, rows, schedules) -> None:
    acme, globex = schedules
    assert listed(alice) == ids(rows, "acme+3", "acme+2", "acme+1", "dead")
    assert listed(alice, f"?schedule__id__exact={globex.pk}") == []
    assert listed(alice, "?q=weekly") == []
    assert listed(alice, f"?q={rows['globex+4'].pk}") == []
    page = alice.get(reverse(LIST)).content.decode()
    # Its filters list only what the user may see.
    assert "?tenant=acme" in page
    assert "?tenant=globex" not in page
    assert f"schedule__id__exact={acme.pk}" in page
    assert f"schedule__id__exact={globex.pk}" not in page


def test_a_small_list_is_counted_exactly(root_client, rows) -> None:
    page = root_client.get(reverse(LIST) + "?state__exact=scheduled").content.decode()
    assert "4 occurrences" in page
    assert "about" not in page.split('class="paginator"')[1]


def test_a_big_list_shows_the_estimate_and_never_counts_or_scans_for_choices(
    root_client, rows, monkeypatch
) -> None:
    # A big list, made small: estimated from five rows up, three rows a page.
    monkeypatch.setattr(admin_lists, "EXACT_COUNT_BELOW", 5)
    monkeypatch.setattr(OccurrenceAdmin, "list_per_page", 3)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_jobs_occurrence")
    with CaptureQueriesContext(connection) as queries:
        page = root_client.get(reverse(LIST)).content.decode()
    over_rows = [q["sql"] for q in queries.captured_queries if "django_jobs_occurrence" in q["sql"]]
    assert [sql for sql in over_rows if "COUNT(" in sql.upper()] == []
    assert [sql for sql in over_rows if "DISTINCT" in sql.upper()] == []
    assert any(sql.startswith("EXPLAIN") for sql in over_rows), over_rows
    assert re.search(r"about \d+ occurrences", page), page
    assert listed(root_client) == ids(rows, "globex+4", "acme+3", "acme+2")


def test_the_last_page_of_an_estimated_list_counts_what_it_shows(
    root_client, rows, monkeypatch
) -> None:
    monkeypatch.setattr(admin_lists, "EXACT_COUNT_BELOW", 5)
    monkeypatch.setattr(OccurrenceAdmin, "list_per_page", 10)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_jobs_occurrence")
    page = root_client.get(reverse(LIST)).content.decode()
    paginator = page.split('class="paginator"')[1]
    assert "about" not in paginator
    assert "5 occurrences" in paginator
