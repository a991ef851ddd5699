"""The benchmark's handlers: nothing at all, and one row written through ``run.atomic()``."""

from __future__ import annotations

from django_jobs import Run, job

from .commands import record_write


@job("perf.noop")
def noop(run: Run) -> None:
    return None


@job("perf.atomic")
def atomic(run: Run) -> None:
    with run.atomic():
        record_write(run.occurrence_key)
