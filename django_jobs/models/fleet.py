"""The fleet's own state: each ``runworker`` process (``Replica``) and what automatic
retention did last (``RetentionState``).
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class ReplicaState(models.TextChoices):
    RUNNING = "running", "running"
    DRAINING = "draining", "draining (stopping, releasing its work)"
    STOPPED = "stopped", "stopped"


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
