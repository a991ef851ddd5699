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
from django.test import Client, override_settings
from django.urls import reverse
from guardian.shortcuts import assign_perm
from prometheus_client.parser import text_string_to_metric_families

from django_jobs import store
from django_jobs.models import Occurrence, OccurrenceState, Replica, Schedule
from django_jobs.testing import FakeClock, use_clock

from .factories import T0, ScheduleFactory
from .storeutil import claim, planned

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
    header, *lines = jobs("list", "--actor", root.username).splitlines()
    line = next(line for line in lines if "acme/billing.mail" in line)
    assert line[header.index("QUEUE") :].split()[0] == "mail"
    listed = json.loads(jobs("list", "--actor", root.username, "--json", "--queue", "reports"))
    assert [(r["key"], r["queue"]) for r in listed["schedules"]] == [("reports.weekly", "reports")]
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
    host: str | None = None,
) -> None:
    """A heartbeat of ``replica_id`` (on this host unless ``host``), ``age`` before ``now``
    (default T0)."""
    at = (now or T0) - age
    store.heartbeat(
        replica_id,
        host=host or socket.gethostname(),
        pid=1234,
        started_at=at,
        now=at,
        state=state,
        concurrency=2,
        running=0,
        queues=queues,
    )


# --- jobs health ----------------------------------------------------------------------------

NOW = T0 + timedelta(minutes=10)


def health(*args: str) -> dict[str, Any]:
    with use_clock(FakeClock(NOW)):
        text = jobs("health", "--json", *args)
    # The JSON report, then the verdict's line.
    report: dict[str, Any] = json.JSONDecoder().raw_decode(text)[0]
    return report


def test_health_reports_a_queue_with_waiting_work_that_no_live_replica_serves(rows) -> None:
    beat("r-mail", queues=[{"name": "mail", "concurrency": 2}], now=NOW)
    # Neither counts, on another host: one silent for an hour, one draining (it claims
    # nothing).
    reports = [{"name": "reports", "concurrency": 1}]
    beat("r-silent", queues=reports, now=NOW, age=timedelta(hours=1), host="other")
    beat("r-draining", queues=reports, now=NOW, state="draining", host="other")
    report = health("--max-age", "30", "--host", socket.gethostname())
    assert [u["queue"] for u in report["unserved_queues"]] == ["default", "reports", "urgent"]
    assert "runworker --queue reports" in report["unserved_queues"][1]["what_to_do"]
    # Reported, not failed: the exit status stays the liveness of this host's replicas.
    with use_clock(FakeClock(NOW)):
        text = jobs("health", "--host", socket.gethostname(), "--max-age", "30")
    assert "unserved queue: reports: work is waiting on it" in text
    assert text.strip().endswith(f"healthy: 1 replica(s) on {socket.gethostname()}")


def test_a_replica_without_queue_serves_every_queue_and_no_waiting_work_is_no_problem(
    rows, schedules
) -> None:
    beat("r-mail", queues=[{"name": "mail", "concurrency": 2}], now=NOW)
    beat("r-every", queues=[], now=NOW)
    assert health("--host", socket.gethostname())["unserved_queues"] == []
    # Without it, the queues whose work ended are not reported: only waiting work counts.
    Replica.objects.filter(pk="r-every").delete()
    Occurrence.objects.exclude(queue="mail").update(state=OccurrenceState.COMPLETED)
    assert health("--host", socket.gethostname())["unserved_queues"] == []


# --- metrics --------------------------------------------------------------------------------

TOKEN = "metrics-token-" + "x" * 32
METRICS = {
    "METRICS_TOKEN": TOKEN,
    "QUEUES": {"reports": {"MAX_RUNNING": 2}, "idle": {"MAX_RUNNING": 1}},
}


def scrape() -> dict[str, dict[str, float]]:
    """The queue families of one scrape, each by its ``queue`` label (the others by name)."""
    with use_clock(FakeClock(NOW)), override_settings(DJANGO_JOBS=METRICS):
        response = Client().get(
            reverse("django_jobs:metrics"), headers={"Authorization": "Bearer " + TOKEN}
        )
    assert response.status_code == 200
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            label = sample.labels.get("queue", sample.labels.get("state", ""))
            found.setdefault(sample.name, {})[label] = sample.value
    return found


def test_the_metrics_count_each_queues_due_and_running_work_and_its_limit(rows) -> None:
    (taken,) = claim("r-mail", NOW, limit=1, queue="mail")
    metrics = scrape()
    assert metrics["django_jobs_queue_due_occurrences"] == {
        "mail": 1,
        "default": 1,
        "urgent": 1,
        "reports": 1,
        "idle": 0,
    }
    assert metrics["django_jobs_queue_running_occurrences"] == {
        "mail": 1,
        "default": 0,
        "urgent": 0,
        "reports": 0,
        "idle": 0,
    }
    assert metrics["django_jobs_queue_max_running"] == {"reports": 2, "idle": 1}
    # The fleet's figures are the same sums as before: the queue families are beside them.
    assert metrics["django_jobs_due_occurrences"]["scheduled"] == 4
    assert Occurrence.objects.get(pk=taken.occurrence_id).queue == "mail"


def test_the_unserved_queue_gauge_is_one_for_a_waiting_queue_no_live_replica_serves(rows) -> None:
    beat("r-mail", queues=[{"name": "mail", "concurrency": 2}], now=NOW)
    beat(
        "r-reports", queues=[{"name": "reports", "concurrency": 1}], now=NOW, age=timedelta(hours=1)
    )
    assert scrape()["django_jobs_queue_unserved"] == {
        "mail": 0,
        "default": 1,
        "urgent": 1,
        "reports": 1,
        "idle": 0,
    }
    beat("r-every", queues=[], now=NOW)
    assert set(scrape()["django_jobs_queue_unserved"].values()) == {0}


# --- the dashboard --------------------------------------------------------------------------


def queue_cells(client: Client) -> dict[str, list[str]]:
    """The dashboard's queue lines, each queue's cells after its name."""
    with use_clock(FakeClock(NOW)), override_settings(DJANGO_JOBS=METRICS):
        response = client.get(reverse("admin:django_jobs_dashboard"))
    assert response.status_code == 200
    rows = re.findall(r'<tr class="jobs-queue"[^>]*>(.*?)</tr>', response.content.decode(), re.S)
    cells = [
        [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td.*?>(.*?)</td>", r)]
        for r in rows
    ]
    return {row[0]: row[1:] for row in cells}


def test_the_dashboard_shows_each_queues_due_running_limit_and_whether_served(
    root_client, rows
) -> None:
    claim("r-mail", NOW, limit=1, queue="mail")
    beat("r-mail", queues=[{"name": "mail", "concurrency": 2}], now=NOW)
    # queue: due, running, limit, served
    assert queue_cells(root_client) == {
        "default": ["1", "0", "-", "no"],
        "idle": ["0", "0", "1", "no"],
        "mail": ["1", "1", "-", "yes"],
        "reports": ["1", "0", "2", "no"],
        "urgent": ["1", "0", "-", "no"],
    }


def test_a_scoped_user_sees_only_their_queues_and_not_the_fleets_figures(rows, schedules) -> None:
    client = staff_on(schedules["default"])
    # Their schedule's work alone; limits and serving are the fleet's (view_replica).
    assert queue_cells(client) == {"default": ["1", "0"], "urgent": ["1", "0"]}
