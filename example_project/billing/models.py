from django.db import models


class Statement(models.Model):
    """A statement run, keyed by the idempotency key of the command that produced it."""

    idempotency_key = models.CharField(max_length=64, unique=True)
    for_date = models.DateField()
    tenant = models.CharField(max_length=100, blank=True, default="")

    def __str__(self) -> str:
        return f"statements for {self.for_date}"


class Heartbeat(models.Model):
    idempotency_key = models.CharField(max_length=64, unique=True)
    beat_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"heartbeat at {self.beat_at.isoformat()}"
