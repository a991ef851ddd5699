"""The fleet's metrics, read from the database at the instant of a scrape, so that any web
process or replica exposes the whole fleet (``django_jobs/metrics.py`` turns them into
Prometheus families; docs/operations.md, "Metrics", says what each means and costs).

Not scoped by tenant or object permission: the interface serving them admits only those who
may view every schedule (or hold the metrics token).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .. import store
from ..conf import get_settings
from ..models import Replica, ReplicaState, RetentionState
from ..store import Buckets, Window
from .health import HealthReport, served_queues

# Upper bounds (seconds) of the histogram buckets: start lateness runs from a claim's
# sub-second delay to an hour behind; durations from a no-op to an hour-long run.
LATENESS_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
DURATION_BUCKETS = (
    0.01,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
)
# The due backlog is counted up to this many rows: a scrape during a backlog of millions
# costs what one of this many does, and reports this figure (and the oldest's age).
DUE_COUNT_CAP = 100_000
# The queue metrics carry at most this many queues (the declared ones first, then the others
# by name): a queue is a label value, and queues are meant to be few.
QUEUE_LABELS = 100


@dataclass(frozen=True)
class QueueFigures:
    """One queue's figures in a scrape."""

    due: int  # due, unstarted occurrences on it (within DUE_COUNT_CAP in all)
    running: int  # occurrences on it running now (processing, lease not lapsed)
    max_running: int | None  # DJANGO_JOBS["QUEUES"][name]["MAX_RUNNING"], None: no limit
    waiting: bool  # has occurrences scheduled or waiting for their retry, due or not
    served: bool  # a live replica serves it (one without --queue serves every queue)

    @property
    def unserved(self) -> bool:
        """Work waits on it and no live replica serves it: it waits until one does."""
        return self.waiting and not self.served


@dataclass(frozen=True)
class FleetMetrics:
    """What one scrape reports, read at ``now``."""

    now: datetime
    window: timedelta
    due: dict[str, int]  # due, unstarted occurrences by state (at most DUE_COUNT_CAP in all)
    oldest_due_seconds: float  # how long the oldest of them has been due; 0 when none is
    dead_letters: int
    recent: Window  # the occurrences scheduled in the last ``window``
    replicas: dict[str, int]  # replicas heartbeating within ``heartbeat_max_age``, by state
    stale_replicas: int  # not stopped, yet silent for longer than that
    running: int  # occurrences the fresh replicas reported running at their last heartbeat
    retention: dict[str, Any] | None  # HealthReport.retention_dict(): None before any pass
    # By queue: the declared ones (DJANGO_JOBS["QUEUES"]) and those with due, running or
    # waiting work, at most QUEUE_LABELS.
    queues: dict[str, QueueFigures] = field(default_factory=dict)

    @property
    def due_capped(self) -> bool:
        return sum(self.due.values()) >= DUE_COUNT_CAP


def fleet_metrics(
    *, now: datetime, window: timedelta, heartbeat_max_age: timedelta
) -> FleetMetrics:
    """Read the fleet's metrics at ``now``: a handful of statements, each bounded by an index
    (``store/sql/metrics.sql``), and the small replica and retention tables."""
    oldest = store.oldest_due(now=now)
    replicas, stale, running = _replicas(now=now, max_age=heartbeat_max_age)
    retention = RetentionState.objects.filter(pk=1).first()
    backlog = store.due_backlog(now=now, cap=DUE_COUNT_CAP)
    due: dict[str, int] = {}
    for (state, _), n in backlog.items():
        due[state] = due.get(state, 0) + n
    return FleetMetrics(
        now=now,
        window=window,
        due=due,
        oldest_due_seconds=max((now - oldest).total_seconds(), 0.0) if oldest else 0.0,
        dead_letters=store.dead_letters(),
        recent=store.recent_window(
            since=now - window,
            now=now,
            lateness_le=LATENESS_BUCKETS,
            duration_le=DURATION_BUCKETS,
        ),
        replicas=replicas,
        stale_replicas=stale,
        running=running,
        retention=HealthReport(
            host="", replicas=[], stale=[], now=now, retention=retention
        ).retention_dict(),
        queues=queue_figures(backlog, now=now, max_age=heartbeat_max_age),
    )


def queue_figures(
    backlog: dict[tuple[str, str], int], *, now: datetime, max_age: timedelta
) -> dict[str, QueueFigures]:
    """Each queue's figures: the declared queues and those with due, running or waiting work
    (at most ``QUEUE_LABELS``, the declared ones first)."""
    due: dict[str, int] = {}
    for (_, queue), n in backlog.items():
        due[queue] = due.get(queue, 0) + n
    running = store.running_by_queue(now=now)
    waiting = set(store.waiting_queues())
    limits = get_settings().max_running
    served = served_queues(now=now, max_age=max_age)
    others = (set(due) | set(running) | waiting) - set(limits)
    names = [*sorted(limits), *sorted(others)][:QUEUE_LABELS]
    return {
        name: QueueFigures(
            due=due.get(name, 0),
            running=running.get(name, 0),
            max_running=limits.get(name),
            waiting=name in waiting,
            served=served is None or name in served,
        )
        for name in names
    }


def _replicas(*, now: datetime, max_age: timedelta) -> tuple[dict[str, int], int, int]:
    """Replicas neither stopped nor gone: the fresh ones by state, how many are stale, and how
    many occurrences the fresh ones run (``jobs health`` ages heartbeats the same way)."""
    fresh: dict[str, int] = {}
    stale = running = 0
    # A replica declared gone (its silence reported by the replica_gone signal) is neither.
    ended = [ReplicaState.STOPPED, ReplicaState.GONE]
    rows = Replica.objects.exclude(state__in=ended).values_list("state", "heartbeat_at", "running")
    for state, heartbeat_at, busy in rows:
        if now - heartbeat_at > max_age:
            stale += 1
            continue
        fresh[state] = fresh.get(state, 0) + 1
        running += busy
    return fresh, stale, running


__all__ = [
    "DUE_COUNT_CAP",
    "DURATION_BUCKETS",
    "LATENESS_BUCKETS",
    "QUEUE_LABELS",
    "Buckets",
    "FleetMetrics",
    "QueueFigures",
    "Window",
    "fleet_metrics",
]
