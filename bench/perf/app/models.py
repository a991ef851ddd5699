from __future__ import annotations

from django.db import models


class Write(models.Model):
    """The one row the atomic handler commits with its completion."""

    occurrence_key = models.CharField(max_length=64)
    objects: models.Manager[Write] = models.Manager()

    class Meta:
        app_label = "perf"

    def __str__(self) -> str:
        return f"write of {self.occurrence_key}"
