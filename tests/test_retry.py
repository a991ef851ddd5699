from __future__ import annotations

import random
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_jobs.worker.retry import backoff_delay

BASE = timedelta(seconds=30)
CAP = timedelta(minutes=10)


@given(failures=st.integers(min_value=1, max_value=10_000), seed=st.integers())
def test_backoff_is_capped_exponential_with_jitter(failures: int, seed: int) -> None:
    delay = backoff_delay(failures, base=BASE, cap=CAP, rand=random.Random(seed))
    raw = min(BASE.total_seconds() * 2 ** min(failures - 1, 64), CAP.total_seconds())
    assert raw * 0.5 - 1e-6 <= delay.total_seconds() <= raw + 1e-6


def test_backoff_refuses_zero_failures() -> None:
    with pytest.raises(ValueError, match="failures must be 1 or more"):
        backoff_delay(0, base=BASE, cap=CAP)
