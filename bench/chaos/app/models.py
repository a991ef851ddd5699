from __future__ import annotations

from django.db import models


class Effect(models.Model):
    """A write a handler committed through ``run.atomic()``: one per completed occurrence.

    No unique constraint on purpose: a double execution shows as two rows.
    """

    schedule = models.CharField(max_length=200)
    occurrence_key = models.CharField(max_length=64)
    token = models.BigIntegerField()
    replica = models.CharField(max_length=200)
    objects: models.Manager[Effect] = models.Manager()

    class Meta:
        app_label = "chaos"
        indexes = [models.Index(fields=["occurrence_key"])]

    def __str__(self) -> str:
        return f"effect of {self.occurrence_key}"


class OutsideCall(models.Model):
    """A call to the 'partner system' a handler makes through ``run.once()``, as the partner
    received it: every delivery, duplicates included."""

    idempotency_key = models.CharField(max_length=200)
    replica = models.CharField(max_length=200)
    objects: models.Manager[OutsideCall] = models.Manager()

    class Meta:
        app_label = "chaos"

    def __str__(self) -> str:
        return f"call {self.idempotency_key}"


class OutsideEffect(models.Model):
    """What the partner applied: one row per idempotency key, as a partner that honours the
    occurrence key (the spec's idempotency key) would keep it."""

    idempotency_key = models.CharField(max_length=200, unique=True)
    deliveries = models.PositiveIntegerField(default=1)
    objects: models.Manager[OutsideEffect] = models.Manager()

    class Meta:
        app_label = "chaos"

    def __str__(self) -> str:
        return f"applied {self.idempotency_key}"


class Sign(models.Model):
    """A sign of life a handler leaves while it works: which run (occurrence and fencing
    token), on which replica life, at the database's clock (``clock_timestamp()``, the moment
    the row was written, not the transaction's frozen ``now()``).

    The crasher leaves one as it starts (then kills its replica); the stubborn handler leaves
    one every 0.2 s while it ignores cancellation.
    """

    job = models.CharField(max_length=50)
    occurrence_key = models.CharField(max_length=64)
    token = models.BigIntegerField()
    replica = models.CharField(max_length=200)
    at = models.DateTimeField()
    objects: models.Manager[Sign] = models.Manager()

    class Meta:
        app_label = "chaos"
        indexes = [models.Index(fields=["occurrence_key", "token"])]

    def __str__(self) -> str:
        return f"{self.job} alive in {self.occurrence_key} at {self.at}"


class SessionView(models.Model):
    """What a run found in its database session before doing anything itself: state that an
    earlier run left on the connection (a setting, a temporary table, advisory locks) shows
    here as a non-empty ``setting``, ``temp_table`` or ``advisory_locks``."""

    job = models.CharField(max_length=50)
    occurrence_key = models.CharField(max_length=64)
    token = models.BigIntegerField()
    replica = models.CharField(max_length=200)
    backend_pid = models.IntegerField()
    setting = models.TextField(blank=True, default="")
    temp_table = models.BooleanField(default=False)
    advisory_locks = models.IntegerField(default=0)
    objects: models.Manager[SessionView] = models.Manager()

    class Meta:
        app_label = "chaos"

    def __str__(self) -> str:
        return f"session of {self.occurrence_key} as {self.job} found it"
