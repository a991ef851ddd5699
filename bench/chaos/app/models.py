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
