"""When a failed attempt runs again: capped exponential backoff with jitter. Pure."""

from __future__ import annotations

import random
from datetime import timedelta


def backoff_delay(
    failures: int,
    *,
    base: timedelta,
    cap: timedelta,
    rand: random.Random | None = None,
) -> timedelta:
    """The wait before the next attempt after ``failures`` failed attempts (1 or more).

    ``base * 2**(failures-1)``, capped at ``cap``, then scaled by a random factor in
    [0.5, 1.0] ("equal jitter"), so replicas that failed together do not retry together.
    """
    if failures < 1:
        raise ValueError(f"failures must be 1 or more, got {failures}")
    exponent = min(failures - 1, 64)  # 2**64 already exceeds any sensible cap
    seconds = min(base.total_seconds() * 2.0**exponent, cap.total_seconds())
    factor = (rand or random).uniform(0.5, 1.0)
    return timedelta(seconds=max(seconds, 0.0) * factor)
