"""Queues in every operator surface (issue #36): the admin's lists, ``jobs list``, ``jobs
health``, the metrics and the dashboard show which queue work is on, and a queue with waiting
work that no live replica serves is reported.

Real PostgreSQL throughout; time is the injected clock.
"""

from __future__ import annotations

import json
import re
import socket
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from guardian.shortcuts import assign_perm

from django_jobs import store
from django_jobs.models import Occurrence, Schedule

from .factories import T0, ScheduleFactory
from .storeutil import planned

pytestmark = pytest.mark.django_db

OCCURRENCES = "admin:django_jobs_occurrence_changelist"
SCHEDULES = "admin:django_jobs_schedule_changelist"
OCCURRENCE_ROW = re.compile(r"/admin/django_jobs/occurrence/([0-9a-f-]{36})/change/")
SCHEDULE_ROW = re.compile(r"/admin/django_jobs/schedule/(\d+)/change/")


def on_queue(schedule: Schedule, *minutes: int, queue: str | None = None) -> list[Occurrence]:
    """Occurrences of ``schedule`` at T0 + ``minutes``, planned on its queue (or moved to
    ``queue``, where enqueued work on another queue than its policy record's is)."""
    instants = [T0 + timedelta(minutes=m) for m in minutes]
    store.plan(planned(schedule, *instants), now=T0)
    made = Occurrence.objects.filter(schedule=schedule, scheduled_at__in=instants)
    if queue is not None:
        made.update(queue=queue)
    return list(made)


@pytest.fixture
def schedules() -> dict[str, Schedule]:
    return {
        "mail": ScheduleFactory.create(tenant="acme", key="billing.mail", queue="mail"),
        "default": ScheduleFactory.create(tenant="acme", key="billing.nightly"),
        "reports": ScheduleFactory.create(tenant="globex", key="reports.weekly", queue="reports"),
    }


@pytest.fixture
def rows(schedules: dict[str, Schedule]) -> dict[str, list[Occurrence]]:
    return {
        "mail": on_queue(schedules["mail"], 1, 2),
        "default": on_queue(schedules["default"], 3),
        # acme's enqueued work on a queue none of its schedules is on
        "urgent": on_queue(schedules["default"], 4, queue="urgent"),
        "reports": on_queue(schedules["reports"], 5),
    }


def staff_on(schedule: Schedule) -> Client:
    """Staff holding the object permission to view ``schedule`` only."""
    user = User.objects.create_user(f"staff-{schedule.pk}", password="pw", is_staff=True)
    assign_perm("django_jobs.view_schedule", user, schedule)
    client = Client()
    client.force_login(user)
    return client


def page(client: Client, name: str, query: str = "") -> str:
    response = client.get(reverse(name) + query)
    assert response.status_code == 200, response
    return response.content.decode()


def occurrence_ids(client: Client, query: str = "") -> set[str]:
    return set(OCCURRENCE_ROW.findall(page(client, OCCURRENCES, query)))


def ids(*groups: list[Occurrence]) -> set[str]:
    return {str(o.pk) for group in groups for o in group}


# --- the admin ------------------------------------------------------------------------------


def test_the_occurrences_list_filters_by_queue_and_shows_it(root_client, rows) -> None:
    assert occurrence_ids(root_client, "?queue=mail") == ids(rows["mail"])
    assert occurrence_ids(root_client, "?queue=urgent") == ids(rows["urgent"])
    assert occurrence_ids(root_client, "?queue=reports&tenant=globex") == ids(rows["reports"])
    listing = page(root_client, OCCURRENCES)
    # A column, and a filter offering each queue: the schedules' and enqueued work's own.
    assert re.search(r'<th[^>]*class="[^"]*column-queue', listing), listing
    for queue in ("mail", "default", "urgent", "reports"):
        assert f"?queue={queue}" in listing, queue


def test_the_schedules_list_filters_by_queue_and_shows_it(root_client, schedules) -> None:
    listing = page(root_client, SCHEDULES, "?queue=mail")
    assert set(SCHEDULE_ROW.findall(listing)) == {str(schedules["mail"].pk)}
    assert re.search(r'<th[^>]*class="[^"]*column-queue', listing), listing
    assert "?queue=reports" in listing


def test_a_scoped_user_is_offered_only_the_queues_of_what_they_may_see(rows, schedules) -> None:
    client = staff_on(schedules["default"])
    occurrences = page(client, OCCURRENCES)
    # Its schedule's queue, and the queue its enqueued work went on: never globex's.
    assert "?queue=default" in occurrences
    assert "?queue=urgent" in occurrences
    assert "?queue=reports" not in occurrences
    assert "?queue=mail" not in occurrences
    assert occurrence_ids(client, "?queue=reports") == set()
    assert occurrence_ids(client, "?queue=urgent") == ids(rows["urgent"])
    listing = page(client, SCHEDULES)
    assert "?queue=default" in listing
    assert "?queue=reports" not in listing
    assert "?queue=mail" not in listing


def test_the_replicas_list_shows_the_queues_each_serves(root_client) -> None:
    beat("r-mail", queues=[{"name": "mail", "concurrency": 2}])
    beat("r-all", queues=[])
    listing = page(root_client, "admin:django_jobs_replica_changelist")
    assert "mail:2" in listing
    assert "every queue" in listing


# --- jobs list ------------------------------------------------------------------------------


def jobs(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out)
    return out.getvalue()


def test_jobs_list_shows_each_schedules_queue_and_filters_by_it(root, schedules) -> None:
    text = jobs("list", "--actor", root.username)
    line = next(line for line in text.splitlines() if "acme/billing.mail" in line)
    assert "queue mail" in line
    listed = json.loads(jobs("list", "--actor", root.username, "--json", "--queue", "reports"))
    assert [(r["key"], r["queue"]) for r in listed] == [("reports.weekly", "reports")]
    assert jobs("list", "--actor", root.username, "--queue", "nowhere").strip() == (
        "no schedules you may see on queue 'nowhere'"
    )


# --- helpers shared with the health, metrics and dashboard tests below -----------------------


def beat(
    replica_id: str,
    *,
    queues: list[dict[str, Any]],
    age: timedelta = timedelta(seconds=1),
    state: str = "running",
    now: Any = None,
) -> None:
    """A heartbeat of ``replica_id`` on this host, ``age`` before ``now`` (default T0)."""
    at = (now or T0) - age
    store.heartbeat(
        replica_id,
        host=socket.gethostname(),
        pid=1234,
        started_at=at,
        now=at,
        state=state,
        concurrency=2,
        running=0,
        queues=queues,
    )
