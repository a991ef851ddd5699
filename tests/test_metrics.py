"""Prometheus metrics (issue #19, item 6): the view in ``django_jobs.urls`` and
``runworker --metrics-port`` expose what the database holds, fleet-wide, to whom may see it.

Every figure is checked against the ORM, queried independently of the metrics' SQL.
"""

from __future__ import annotations

import re
import socket
import urllib.request
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client, override_settings
from django.urls import reverse
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from django_jobs import store
from django_jobs.clock import use_clock
from django_jobs.exceptions import ConfigurationError
from django_jobs.metrics import FleetCollector
from django_jobs.models import (
    CLAIMABLE_STATES,
    Attempt,
    AttemptOutcome,
    Occurrence,
    OccurrenceState,
    Replica,
    ReplicaState,
    RetentionState,
    Trigger,
)
from django_jobs.registry import Registry
from django_jobs.safe_error import SafeError
from django_jobs.services import DURATION_BUCKETS, LATENESS_BUCKETS
from django_jobs.testing import FakeClock, run_due

from .concurrency import wait_until
from .factories import T0, ScheduleFactory
from .storeutil import claim, plan

TOKEN = "metrics-token-" + "x" * 32
WINDOW = 3600.0
SETTINGS = {"METRICS_TOKEN": TOKEN, "METRICS_WINDOW_SECONDS": WINDOW}

pytestmark = pytest.mark.django_db


def scrape(client: Client | None = None, **headers: str) -> Any:
    client = client or Client()
    return client.get(reverse("django_jobs:metrics"), headers=headers)


def parsed(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Samples by name, then by their sorted labels."""
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def by_label(samples: dict[str, Any], name: str, label: str) -> dict[str, float]:
    return {dict(labels)[label]: value for labels, value in samples[name].items()}


def value(samples: dict[str, Any], name: str) -> float:
    return float(samples[name][()])


# --- who may read them ----------------------------------------------------------------------


@override_settings(DJANGO_JOBS=SETTINGS)
def test_the_metrics_refuse_an_anonymous_request() -> None:
    response = scrape()
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"django_jobs_" not in response.content


@override_settings(DJANGO_JOBS=SETTINGS)
def test_the_metrics_refuse_a_wrong_token() -> None:
    response = scrape(Authorization="Bearer " + TOKEN[:-1] + "y")
    assert response.status_code == 401
    assert b"django_jobs_" not in response.content


def test_without_a_configured_token_every_bearer_token_is_refused() -> None:
    response = scrape(Authorization="Bearer " + TOKEN)
    assert response.status_code == 401
    assert b"django_jobs_" not in response.content


def staff(*permissions: str, **fields: Any) -> Client:
    user = User.objects.create_user("ops", password="pw", **{"is_staff": True, **fields})
    for codename in permissions:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    return client


def test_the_metrics_refuse_staff_without_the_model_wide_view_permission() -> None:
    response = scrape(staff("change_schedule"))
    assert response.status_code == 403
    assert b"django_jobs_" not in response.content


def test_the_metrics_refuse_a_user_who_is_not_staff_even_with_the_permission() -> None:
    response = scrape(staff("view_schedule", is_staff=False))
    assert response.status_code == 403


def test_staff_with_the_model_wide_view_permission_read_the_metrics() -> None:
    response = scrape(staff("view_schedule"))
    assert response.status_code == 200
    assert response["Content-Type"] == CONTENT_TYPE_LATEST
    assert value(parsed(response.content.decode()), "django_jobs_scrape_error") == 0


@override_settings(DJANGO_JOBS=SETTINGS)
def test_the_right_token_reads_the_metrics() -> None:
    response = scrape(Authorization="Bearer " + TOKEN)
    assert response.status_code == 200
    assert response["Content-Type"] == CONTENT_TYPE_LATEST
    assert value(parsed(response.content.decode()), "django_jobs_scrape_error") == 0


@pytest.mark.parametrize("token", ["short", "x" * 31, "with space " + "x" * 32, 12345])
def test_a_metrics_token_that_is_short_or_not_a_header_value_is_refused(token: object) -> None:
    from django_jobs.conf import get_settings

    with (
        override_settings(DJANGO_JOBS={"METRICS_TOKEN": token}),
        pytest.raises(ConfigurationError, match=r"METRICS_TOKEN'\] must be a string of at"),
    ):
        get_settings()


# --- what they say --------------------------------------------------------------------------


def succeeds(run: Any) -> None:
    return None


def fails(run: Any) -> None:
    raise RuntimeError("the metrics test's failing job")


@pytest.fixture
def fleet_run(clock: FakeClock) -> FakeClock:
    """A few hundred occurrences run inline over two hours, in 40 passes: completed, dead
    after a retry, skipped for misfire, and work still due; a lease takeover and a fenced-out
    write; four replica rows and a retention pass."""
    jobs = Registry()
    jobs.register("metrics.ok", succeeds)
    jobs.register("metrics.fails", fails)
    every = {"interval": timedelta(seconds=60), "anchor": T0, "next_due_at": T0}
    ScheduleFactory.create(key="metrics.ok", job="metrics.ok", **every)
    ScheduleFactory.create(
        key="metrics.fails",
        job="metrics.fails",
        max_attempts=2,
        backoff=timedelta(seconds=1),
        max_backoff=timedelta(seconds=1),
        **every,
    )
    ScheduleFactory.create(
        key="metrics.late",
        job="metrics.ok",
        max_delay=timedelta(seconds=20),
        misfire="replay_once",
        interval=timedelta(seconds=10),
        anchor=T0,
        next_due_at=T0,
    )
    for _ in range(40):
        clock.advance(timedelta(seconds=181))
        run_due(clock, jobs=jobs)
    # Work still due: a schedule whose job no replica here has a handler for.
    waiting = ScheduleFactory.create(key="metrics.waiting", job="metrics.nobody")
    plan(waiting, *(clock.now() - timedelta(minutes=m) for m in (1, 2, 3)), now=clock.now())
    takeover(clock)
    replicas(clock)
    RetentionState.objects.create(
        replica="r1",
        started_at=clock.now() - timedelta(minutes=10),
        finished_at=clock.now() - timedelta(minutes=9),
        deleted=7,
        seconds=0.5,
        caught_up=False,
        caught_up_at=clock.now() - timedelta(minutes=30),
    )
    return clock


def takeover(clock: FakeClock) -> None:
    """Two claims by ``a`` whose leases lapse, taken over by ``b``: one attempt of ``a`` ends
    ``lease_lost``; ``a``'s late completion of the other is refused by the fence (its attempt
    ends ``fenced_out``)."""
    schedule = ScheduleFactory.create(key="metrics.takeover", job="metrics.nobody", tenant="t")
    first, second = clock.now() - timedelta(seconds=6), clock.now() - timedelta(seconds=5)
    plan(schedule, first, second, now=second)
    lost = claim("a", clock.now(), lease_for=timedelta(seconds=1), tenant="t")
    clock.advance(timedelta(seconds=2))
    held = claim("b", clock.now(), tenant="t")
    assert store.complete(lost[1:], now=clock.now()).refused == {lost[1].occurrence_id}
    assert len(store.complete(held, now=clock.now()).accepted) == 2


def replicas(clock: FakeClock) -> None:
    now = clock.now()
    for name, state, beat, running in [
        ("fresh-1", ReplicaState.RUNNING, now, 2),
        ("fresh-2", ReplicaState.DRAINING, now - timedelta(seconds=5), 1),
        ("silent", ReplicaState.RUNNING, now - timedelta(minutes=5), 4),
        ("gone", ReplicaState.STOPPED, now - timedelta(minutes=1), 0),
        ("declared-gone", ReplicaState.GONE, now - timedelta(minutes=10), 3),
    ]:
        Replica.objects.create(
            id=name,
            host="h",
            pid=1,
            started_at=now - timedelta(hours=1),
            heartbeat_at=beat,
            state=state,
            running=running,
        )


def read(clock: FakeClock) -> dict[str, Any]:
    with use_clock(clock), override_settings(DJANGO_JOBS=SETTINGS):
        response = scrape(Authorization="Bearer " + TOKEN)
    assert response.status_code == 200
    return parsed(response.content.decode())


def in_window(clock: FakeClock) -> Any:
    now = clock.now()
    return Occurrence.objects.filter(
        scheduled_at__gt=now - timedelta(seconds=WINDOW), scheduled_at__lte=now
    )


@pytest.mark.slow
def test_after_a_run_of_a_few_hundred_occurrences_every_count_is_the_databases(
    fleet_run: FakeClock,
) -> None:
    clock = fleet_run
    metrics = read(clock)
    now = clock.now()
    states = Counter(Occurrence.objects.values_list("state", flat=True))
    assert sum(states.values()) >= 300
    assert {"completed", "dead", "skipped"} <= set(states)

    recent = Counter(in_window(clock).values_list("state", flat=True))
    assert by_label(metrics, "django_jobs_recent_occurrences", "state") == {
        s: float(recent.get(s, 0)) for s in OccurrenceState
    }
    assert recent["completed"] < states["completed"]  # the window holds only the last hour
    assert value(metrics, "django_jobs_window_seconds") == WINDOW

    due = Occurrence.objects.filter(state__in=CLAIMABLE_STATES, due_at__lte=now)
    due_states = Counter(due.values_list("state", flat=True))
    assert due_states["scheduled"] >= 3
    assert by_label(metrics, "django_jobs_due_occurrences", "state") == {
        s: float(due_states.get(s, 0)) for s in CLAIMABLE_STATES
    }
    oldest = min(due.values_list("due_at", flat=True))
    assert value(metrics, "django_jobs_due_oldest_seconds") == (now - oldest).total_seconds()

    dead = Occurrence.objects.filter(state=OccurrenceState.DEAD).count()
    assert dead > 0
    assert value(metrics, "django_jobs_dead_letters") == dead

    attempts = Counter(
        Attempt.objects.filter(occurrence__in=in_window(clock)).values_list("outcome", flat=True)
    )
    assert attempts[AttemptOutcome.LEASE_LOST] == 1
    assert attempts[AttemptOutcome.FENCED_OUT] == 1
    assert value(metrics, "django_jobs_recent_lease_takeovers") == 1
    assert value(metrics, "django_jobs_recent_fenced_out") == 1

    assert by_label(metrics, "django_jobs_replicas", "state") == {"running": 1, "draining": 1}
    assert value(metrics, "django_jobs_replicas_stale") == 1
    assert value(metrics, "django_jobs_running_occurrences") == 3

    assert value(metrics, "django_jobs_retention_lag_seconds") == 30 * 60
    assert value(metrics, "django_jobs_retention_last_pass_age_seconds") == 9 * 60
    assert value(metrics, "django_jobs_retention_deleted_last_pass") == 7


def first_starts(clock: FakeClock) -> list[float]:
    """Each started occurrence's lateness in the window, from its first Attempt (an
    operator's manual run is left out)."""
    found = []
    for occurrence in in_window(clock).exclude(started_at=None).exclude(trigger=Trigger.MANUAL):
        first = Attempt.objects.get(occurrence=occurrence, number=1)
        start = occurrence.started_at if occurrence.attempts == 1 else first.started_at
        found.append((start - occurrence.scheduled_at).total_seconds())
    return found


def durations(clock: FakeClock) -> list[float]:
    return [
        (o.finished_at - o.started_at).total_seconds()
        for o in in_window(clock).filter(state=OccurrenceState.COMPLETED)
    ]


def assert_histogram(metrics: dict[str, Any], name: str, le: tuple, values: list[float]) -> None:
    buckets = by_label(metrics, f"{name}_bucket", "le")
    expected = {f"{bound:g}": float(sum(v <= bound for v in values)) for bound in le}
    assert buckets == {**expected, "+Inf": float(len(values))}
    assert value(metrics, f"{name}_gcount") == len(values)
    assert value(metrics, f"{name}_gsum") == pytest.approx(sum(values))


@pytest.mark.slow
def test_the_lateness_and_duration_histograms_hold_the_windows_occurrences(
    fleet_run: FakeClock,
) -> None:
    metrics = read(fleet_run)
    lateness, duration = first_starts(fleet_run), durations(fleet_run)
    assert len({round(v) for v in lateness}) > 1  # spread over several buckets
    assert_histogram(
        metrics, "django_jobs_recent_start_lateness_seconds", LATENESS_BUCKETS, lateness
    )
    assert_histogram(metrics, "django_jobs_recent_duration_seconds", DURATION_BUCKETS, duration)


def test_an_empty_database_reports_zeros_and_no_retention(clock: FakeClock) -> None:
    metrics = read(clock)
    assert by_label(metrics, "django_jobs_due_occurrences", "state") == {
        "scheduled": 0,
        "failed": 0,
        "processing": 0,
    }
    assert value(metrics, "django_jobs_due_oldest_seconds") == 0
    assert value(metrics, "django_jobs_dead_letters") == 0
    assert value(metrics, "django_jobs_recent_start_lateness_seconds_gcount") == 0
    assert "django_jobs_retention_lag_seconds" not in metrics


def test_a_dead_letter_outside_the_window_still_counts_as_a_dead_letter(clock: FakeClock) -> None:
    schedule = ScheduleFactory.create()
    plan(schedule, T0, now=T0)
    (lease,) = claim("w", T0)
    store.dead_letter(lease, now=T0, error=SafeError("RuntimeError", "boom"))
    clock.set(T0 + timedelta(days=2))
    metrics = read(clock)
    assert value(metrics, "django_jobs_dead_letters") == 1
    assert by_label(metrics, "django_jobs_recent_occurrences", "state")["dead"] == 0


def test_a_database_error_during_a_scrape_is_reported_as_a_scrape_error(
    clock: FakeClock,
) -> None:
    """The collector answers with ``django_jobs_scrape_error 1`` instead of raising (a scrape
    of a replica must never crash it): here the statement fails in a broken transaction."""
    with connection.cursor() as cursor:
        cursor.execute("SAVEPOINT broken")
        with pytest.raises(Exception, match="division by zero"):
            cursor.execute("SELECT 1 / 0")
        with use_clock(clock):
            families = {f.name: f for f in FleetCollector().collect()}
        cursor.execute("ROLLBACK TO SAVEPOINT broken")
    assert families["django_jobs_scrape_error"].samples[0].value == 1
    assert "django_jobs_dead_letters" not in families


# --- runworker --metrics-port --------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fetch(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


@pytest.mark.django_db(transaction=True)
def test_runworker_serves_the_fleets_and_its_own_metrics_on_its_metrics_port(start) -> None:
    schedule = ScheduleFactory.create(key="metrics.proc", job="proc.effect")
    plan(schedule, T0, now=T0)
    port = free_port()
    replica = start("metrics-replica", args=["--metrics-port", str(port)])
    wait_until(
        lambda: Occurrence.objects.filter(schedule=schedule, state="completed").exists(),
        timeout=60,
        what="the occurrence to complete",
    )

    def served() -> dict[str, Any]:
        return parsed(fetch(port))

    wait_until(
        lambda: ("metrics-replica", "completed") in own_outcomes(served()),
        timeout=30,
        what=lambda: f"the replica to count its completion: {replica.log_path.read_text()[-2000:]}",
    )
    metrics = served()
    assert value(metrics, "django_jobs_scrape_error") == 0
    assert by_label(metrics, "django_jobs_replicas", "state")["running"] >= 1
    assert value(metrics, "django_jobs_dead_letters") == 0
    threads = {
        dict(labels)["role"]: up
        for labels, up in metrics["django_jobs_replica_thread_up"].items()
        if dict(labels)["replica"] == "metrics-replica"
    }
    assert {role: threads.get(role) for role in ("lease_keeper", "completer", "deadlines")} == {
        "lease_keeper": 1,
        "completer": 1,
        "deadlines": 1,
    }
    assert replica.logged("metrics.serving") == 1
    replica.stop()
    assert replica.process.returncode == 0


def own_outcomes(metrics: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (dict(labels)["replica"], dict(labels)["outcome"])
        for labels, n in metrics.get("django_jobs_replica_outcomes_total", {}).items()
        if n >= 1
    }


def test_the_metrics_are_documented_one_by_one() -> None:
    """docs/operations.md, "Metrics", names every family the collector emits."""
    from pathlib import Path

    docs = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text()
    with override_settings(DJANGO_JOBS=SETTINGS):
        names = {f.name for f in FleetCollector().collect()}
    names |= {"django_jobs_replica_outcomes", "django_jobs_replica_running_occurrences"}
    names |= {"django_jobs_replica_thread_up"}
    names |= {
        "django_jobs_retention_lag_seconds",
        "django_jobs_retention_last_pass_age_seconds",
        "django_jobs_retention_deleted_last_pass",
    }
    missing = {n for n in names if not re.search(rf"`{re.escape(n)}(_total)?`", docs)}
    assert missing == set()
