"""When a failed attempt runs again: capped exponential backoff with jitter. Pure.

The same formula spaces the worker's own retries of a store it cannot reach
(``outage.Backoff``), with the outage policy's base and cap instead of the schedule's.
"""

from __future__ import annotations

import random
from datetime import timedelta


def backoff_seconds(
    failures: int,
    *,
    base: float,
    cap: float,
    rand: random.Random | None = None,
) -> float:
    """The wait in seconds after ``failures`` failures in a row (1 or more).

    ``base * 2**(failures-1)``, capped at ``cap``, then scaled by a random factor in
    [0.5, 1.0] ("equal jitter"), so replicas that failed together do not retry together.
    """
    if failures < 1:
        raise ValueError(f"failures must be 1 or more, got {failures}")
    exponent = min(failures - 1, 64)  # 2**64 already exceeds any sensible cap
    seconds = min(base * 2.0**exponent, cap)
    factor = (rand or random).uniform(0.5, 1.0)
    return max(seconds, 0.0) * factor


def backoff_delay(
    failures: int,
    *,
    base: timedelta,
    cap: timedelta,
    rand: random.Random | None = None,
) -> timedelta:
    """The wait before the next attempt after ``failures`` failed attempts (1 or more), from the
    schedule's ``backoff`` (``base``) and ``max_backoff`` (``cap``): see ``backoff_seconds``."""
    seconds = backoff_seconds(
        failures, base=base.total_seconds(), cap=cap.total_seconds(), rand=rand
    )
    return timedelta(seconds=seconds)
