"""The test application's command: record one effect for an occurrence."""

from __future__ import annotations

import os

from .models import Effect


def record(occurrence_key: str, *, token: int) -> Effect:
    return Effect.objects.create(
        occurrence_key=occurrence_key, token=token, replica=os.environ.get("JOBS_TEST_REPLICA", "")
    )
