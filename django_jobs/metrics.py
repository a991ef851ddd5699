"""Prometheus metrics: a collector that reads the database at scrape time, so one scrape of
any web process (the view in ``django_jobs.urls``) or replica (``runworker --metrics-port``)
sees the whole fleet, however many replicas run.

Every metric is a gauge of what the database holds now (retention deletes history, so no
total read from it could be a counter), except a replica's own outcome counters
(``django_jobs_replica_outcomes_total``), which count from that process's start.
docs/operations.md, "Metrics", lists each with its labels, meaning, query and cost.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import structlog
from django.db import Error as DatabaseError
from django.db import connections
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from . import services
from .conf import get_settings
from .models import CLAIMABLE_STATES, OccurrenceState, ReplicaState
from .safe_error import loggable

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from .worker.loop import Worker

log = structlog.get_logger("django_jobs.metrics")

PREFIX = "django_jobs_"
# ``jobs health`` counts a replica silent for this many heartbeat intervals as stale.
HEARTBEAT_INTERVALS = 3


def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, documentation, value=value)


def labelled(
    name: str, documentation: str, label: str, values: dict[str, int], keys: Iterable[str]
) -> GaugeMetricFamily:
    """A gauge with one label, a sample for each of ``keys`` (0 where ``values`` has none)."""
    family = GaugeMetricFamily(PREFIX + name, documentation, labels=[label])
    for key in keys:
        family.add_metric([key], values.get(key, 0))
    return family


def histogram(name: str, documentation: str, buckets: services.Buckets) -> Metric:
    """A gauge histogram (what the window holds now, not a running total)."""
    pairs = [(f"{le:g}", float(n)) for le, n in zip(buckets.le, buckets.counts, strict=True)]
    return GaugeHistogramMetricFamily(
        PREFIX + name,
        documentation,
        buckets=[*pairs, ("+Inf", float(buckets.count))],
        gsum_value=buckets.total,
    )


def fleet_families(fleet: services.FleetMetrics) -> list[Metric]:
    """The fleet's metrics as Prometheus families (docs/operations.md, "Metrics")."""
    window, recent = fleet.window.total_seconds(), fleet.recent
    families: list[Metric] = [
        labelled(
            "due_occurrences",
            "Occurrences due and not started, by state (processing: its lease expired); "
            f"counted up to {services.DUE_COUNT_CAP} in all",
            "state",
            fleet.due,
            [str(s) for s in CLAIMABLE_STATES],
        ),
        gauge(
            "due_oldest_seconds",
            "How long the oldest due, unstarted occurrence has been due (0: none)",
            fleet.oldest_due_seconds,
        ),
        gauge("dead_letters", "Dead occurrences retained (state dead)", fleet.dead_letters),
        gauge("window_seconds", "The window of the django_jobs_recent_* metrics", window),
        labelled(
            "recent_occurrences",
            "Occurrences scheduled in the last window, by their state now",
            "state",
            recent.states,
            [str(s) for s in OccurrenceState],
        ),
        gauge(
            "recent_lease_takeovers",
            "Attempts of occurrences scheduled in the last window whose lease another "
            "replica took over (attempt outcome lease_lost)",
            recent.attempts.get("lease_lost", 0),
        ),
        gauge(
            "recent_fenced_out",
            "Writes of occurrences scheduled in the last window refused for a stale fencing "
            "token (attempt outcome fenced_out)",
            recent.attempts.get("fenced_out", 0),
        ),
        labelled(
            "replicas",
            "Replicas with a recent heartbeat, by state",
            "state",
            fleet.replicas,
            [ReplicaState.RUNNING, ReplicaState.DRAINING],
        ),
        gauge(
            "replicas_stale",
            "Replicas not stopped whose heartbeat is older than the jobs health limit",
            fleet.stale_replicas,
        ),
        gauge(
            "running_occurrences",
            "Occurrences the live replicas run, as their last heartbeat reported",
            fleet.running,
        ),
    ]
    if recent.lateness is not None:
        families.append(
            histogram(
                "recent_start_lateness_seconds",
                "Start lateness (first start minus scheduled instant) of occurrences "
                "scheduled in the last window",
                recent.lateness,
            )
        )
    if recent.duration is not None:
        families.append(
            histogram(
                "recent_duration_seconds",
                "Run duration (finished minus started) of completed occurrences scheduled in "
                "the last window",
                recent.duration,
            )
        )
    return families + queue_families(fleet.queues) + retention_families(fleet.retention)


def queue_families(queues: dict[str, services.QueueFigures]) -> list[Metric]:
    """By queue: due work, what runs, the declared limits, and the unserved queues."""

    def by_queue(name: str, documentation: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(PREFIX + name, documentation, labels=["queue"])

    due = by_queue("queue_due_occurrences", "Occurrences due and not started, by queue")
    running = by_queue(
        "queue_running_occurrences", "Occurrences running now (lease not lapsed), by queue"
    )
    limit = by_queue(
        "queue_max_running", "A queue's fleet-wide limit (DJANGO_JOBS['QUEUES'] MAX_RUNNING)"
    )
    unserved = by_queue(
        "queue_unserved",
        "1 when work waits on the queue (scheduled or failed, due or not) and no live "
        "replica serves it, else 0",
    )
    for name, figures in queues.items():
        due.add_metric([name], figures.due)
        running.add_metric([name], figures.running)
        if figures.max_running is not None:
            limit.add_metric([name], figures.max_running)
        unserved.add_metric([name], 1 if figures.unserved else 0)
    return [due, running, limit, unserved]


def retention_families(retention: dict[str, Any] | None) -> list[Metric]:
    """Automatic retention's last pass (none before the first)."""
    if retention is None:
        return []
    return [
        gauge(
            "retention_lag_seconds",
            "How long since retention last caught up with every Limit (0: the last pass did)",
            float(retention["lag_seconds"]),
        ),
        gauge(
            "retention_last_pass_age_seconds",
            "How long since the last automatic retention pass finished",
            float(retention["seconds_since_last_pass"]),
        ),
        gauge(
            "retention_deleted_last_pass",
            "Occurrences the last retention pass deleted",
            float(retention["deleted"]),
        ),
    ]


class FleetCollector(Collector):
    """The fleet's metrics, read from the database at each scrape.

    A database error is reported, not raised: ``django_jobs_scrape_error`` is 1 and the rest
    is left out. ``close_connection`` closes the calling thread's connection afterwards (the
    worker's metrics server serves each scrape on a thread of its own).
    """

    def __init__(self, *, close_connection: bool = False) -> None:
        self.close_connection = close_connection

    def describe(self) -> list[Metric]:
        return []  # registering must not read the database

    def collect(self) -> list[Metric]:
        started = time.perf_counter()
        settings = get_settings()
        try:
            fleet = services.fleet_metrics(
                now=services.now(),
                window=timedelta(seconds=settings.METRICS_WINDOW_SECONDS),
                heartbeat_max_age=timedelta(
                    seconds=HEARTBEAT_INTERVALS * settings.HEARTBEAT_SECONDS
                ),
            )
            families, error = fleet_families(fleet), 0
        except DatabaseError as exc:
            log.warning(
                "metrics.scrape_failed",
                error=loggable(exc, patterns=settings.REDACT_PATTERNS),
                error_type=type(exc).__name__,
            )
            families, error = [], 1
        finally:
            if self.close_connection:
                connections["default"].close()
        return [
            *families,
            gauge("scrape_error", "1 when the database could not be read for this scrape", error),
            gauge(
                "scrape_duration_seconds",
                "How long this scrape took to read the database",
                time.perf_counter() - started,
            ),
        ]


class ReplicaCollector(Collector):
    """One replica's own counts since it started: what its runs ended as and how many run."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Sequence[Metric]:
        replica = self.worker.replica_id
        outcomes = CounterMetricFamily(
            PREFIX + "replica_outcomes",
            "Runs this replica ended, by outcome, since it started (resets on restart)",
            labels=["replica", "outcome"],
        )
        for outcome, count in sorted(self.worker.counted().items()):
            outcomes.add_metric([replica, outcome], count)
        running = GaugeMetricFamily(
            PREFIX + "replica_running_occurrences",
            "Occurrences this replica holds a lease for and has not finished",
            labels=["replica"],
        )
        running.add_metric([replica], len(self.worker.running()))
        threads = GaugeMetricFamily(
            PREFIX + "replica_thread_up",
            "1 while this replica's thread of that role is alive; 0 while it restarts after a "
            "crash, is dead or has stopped",
            labels=["replica", "role"],
        )
        for role, status in sorted(self.worker.threads().items()):
            threads.add_metric([replica, role], 1 if status == "alive" else 0)
        return [outcomes, running, threads]


def fleet_registry(*, close_connection: bool = False) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector(close_connection=close_connection))
    return registry


def loopback(addr: str) -> bool:
    """Whether ``addr`` is this host only (127.0.0.0/8, ::1, ``localhost``)."""
    if addr == "localhost":
        return True
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def serve_worker_metrics(worker: Worker, *, port: int, addr: str) -> WSGIServer:
    """Serve the fleet's metrics and ``worker``'s own on ``addr:port`` from daemon threads;
    ``shutdown()`` and ``server_close()`` the returned server to stop.

    The port has no authentication and no TLS (the web view has ``METRICS_TOKEN``): whoever
    reaches it reads the fleet's counts and replica names and makes the replica query the
    database at each request. ``runworker`` binds it to 127.0.0.1 unless told otherwise;
    bound anywhere else it says so, ``metrics.unauthenticated``, once at start."""
    registry = fleet_registry(close_connection=True)
    registry.register(ReplicaCollector(worker))
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    bound = server.server_address[1]
    log.info("metrics.serving", replica=worker.replica_id, addr=addr, port=bound)
    if not loopback(addr):
        log.warning(
            "metrics.unauthenticated",
            replica=worker.replica_id,
            addr=addr,
            port=bound,
            hint="anyone who reaches this address reads the metrics without authentication "
            "and each request queries the database: firewall it to Prometheus, or bind "
            "127.0.0.1 (the default) and scrape through the web view with METRICS_TOKEN",
        )
    return server
