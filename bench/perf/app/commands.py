"""The benchmark application's one command, which the atomic handler dispatches."""

from __future__ import annotations

from .models import Write


def record_write(occurrence_key: str) -> None:
    Write.objects.create(occurrence_key=occurrence_key)
