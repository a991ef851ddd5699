"""The campaign's handlers. Each commits its effect through ``run.atomic()``; one also calls a
'partner system' through ``run.once()``; some fail on purpose, some run long."""

from __future__ import annotations

import os
import time
import zlib

from django.db.models import F

from django_jobs import Run, job

from .models import Effect, OutsideCall, OutsideEffect

REPLICA = os.environ.get("CHAOS_REPLICA", "")


def _commit_effect(run: Run, schedule: str) -> None:
    with run.atomic():
        Effect.objects.create(
            schedule=schedule,
            occurrence_key=run.occurrence_key,
            token=run.fencing_token,
            replica=REPLICA,
        )


def _spread(run: Run, low: float, high: float) -> float:
    """A duration in [low, high) that depends only on the occurrence: replays repeat it."""
    return low + (zlib.crc32(run.occurrence_key.encode()) % 1000) / 1000 * (high - low)


def _work(run: Run, seconds: float) -> None:
    """Stand-in for real work: busy for ``seconds``, stopping early when cancelled."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        run.raise_if_cancelled()
        time.sleep(0.05)


def _deliver(idempotency_key: str) -> None:
    """The partner: records every call, applies each idempotency key once."""
    OutsideCall.objects.create(idempotency_key=idempotency_key, replica=REPLICA)
    applied, created = OutsideEffect.objects.get_or_create(idempotency_key=idempotency_key)
    if not created:
        OutsideEffect.objects.filter(pk=applied.pk).update(deliveries=F("deliveries") + 1)


@job("chaos.effect")
def effect(run: Run) -> None:
    _commit_effect(run, "effect")


@job("chaos.outside")
def outside(run: Run) -> None:
    run.once("notify-partner", lambda: _deliver(f"{run.occurrence_key}:notify-partner"))
    _commit_effect(run, "outside")


@job("chaos.long")
def long(run: Run) -> None:
    _work(run, _spread(run, 2.0, 8.0))
    _commit_effect(run, "long")


@job("chaos.flaky")
def flaky(run: Run) -> None:
    """Fails its first 0, 1 or 2 attempts (by occurrence), then succeeds."""
    if run.attempt <= zlib.crc32(run.occurrence_key.encode()) % 3:
        raise RuntimeError(f"flaky: attempt {run.attempt} fails on purpose")
    _commit_effect(run, "flaky")


@job("chaos.doomed")
def doomed(run: Run) -> None:
    raise RuntimeError(f"doomed: attempt {run.attempt} always fails")
