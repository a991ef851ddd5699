"""The fleet's own state: each ``runworker`` process (``Replica``) and what automatic
retention did last (``RetentionState``).
"""

from __future__ import annotations

from django.db import models
from django.db.models import JSONField, Q, Value


class ReplicaState(models.TextChoices):
    RUNNING = "running", "running"
    DRAINING = "draining", "draining (stopping, releasing its work)"
    STOPPED = "stopped", "stopped"
    # Silent past its heartbeats, declared so by another replica (``store.declare_gone``).
    GONE = "gone", "gone (stopped heartbeating)"


class Replica(models.Model):
    """A ``runworker`` process, as it last reported itself. Written by its own heartbeat."""

    id = models.CharField(max_length=200, primary_key=True)
    host = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    state = models.CharField(max_length=10, choices=ReplicaState.choices)
    concurrency = models.PositiveIntegerField(default=1)
    running = models.PositiveIntegerField(default=0)
    # Each of its threads' status by role (``worker.supervision``): "alive", "restarting",
    # "dead" or "stopped". ``jobs health`` fails while one is not alive.
    threads = models.JSONField(default=dict, blank=True, db_default=Value({}, JSONField()))
    # The queues it serves (``runworker --queue NAME[:N]``): a list of {"name", "concurrency"};
    # [] serves every queue.
    queues = models.JSONField(default=list, blank=True, db_default=Value([], JSONField()))

    class Meta:
        indexes = [models.Index(fields=["host", "heartbeat_at"], name="django_jobs_replica_host")]

    def __str__(self) -> str:
        return self.id


class RetentionState(models.Model):
    """What automatic retention did last, fleet-wide (one row, written by the replica that
    held the retention lock): ``jobs health --json`` reports it."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    replica = models.CharField(max_length=200)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    deleted = models.PositiveBigIntegerField(default=0)  # occurrences deleted by the pass
    retired = models.PositiveIntegerField(default=0)  # one-offs retired by the pass
    removed = models.PositiveIntegerField(default=0)  # retired one-offs removed by the pass
    seconds = models.FloatField(default=0)  # time spent deleting
    caught_up = models.BooleanField(default=True)  # nothing past retention was left
    caught_up_at = models.DateTimeField(null=True, blank=True)  # the last pass that was

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="django_jobs_one_state")]

    def __str__(self) -> str:
        return f"retention at {self.finished_at.isoformat()} by {self.replica}"


class SyncState(models.Model):
    """The declared set the last completed sync wrote, fleet-wide (one row): a replica whose
    declarations have the same fingerprint skips its start-up sync (docs/worker.md,
    "Start-up")."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    fingerprint = models.CharField(max_length=64)  # sha256 of the declared set, hex
    schedules = models.PositiveIntegerField(default=0)  # declarations in the set
    synced_at = models.DateTimeField()
    synced_by = models.CharField(max_length=200)  # the replica or the command that synced
    seconds = models.FloatField(default=0)  # how long that sync took

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="django_jobs_one_sync")]

    def __str__(self) -> str:
        return f"declared set {self.fingerprint[:12]} synced at {self.synced_at.isoformat()}"
