from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from django_jobs.identity import occurrence_id

INSTANT = datetime(2026, 11, 1, 5, 30, tzinfo=UTC)


def _identity_in_new_process(tenant: str, key: str, iso: str) -> str:
    code = (
        "from datetime import datetime; from django_jobs.identity import occurrence_id; "
        f"print(occurrence_id({tenant!r}, {key!r}, datetime.fromisoformat({iso!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    return out.stdout.strip()


@pytest.mark.processes
def test_identity_is_the_same_in_two_separate_processes() -> None:
    here = str(occurrence_id("acme", "billing.nightly", INSTANT))
    first = _identity_in_new_process("acme", "billing.nightly", INSTANT.isoformat())
    # The second process is told the same instant in another zone: identity is over UTC.
    other_zone = INSTANT.astimezone(ZoneInfo("America/New_York")).isoformat()
    second = _identity_in_new_process("acme", "billing.nightly", other_zone)
    assert first == here
    assert second == here


def test_identity_is_pinned_forever() -> None:
    # Changing the namespace or the canonical string would re-key every stored occurrence.
    assert str(occurrence_id("", "billing.nightly", INSTANT)) == (
        "b34f73ab-b916-51ca-8947-d5539a9eae27"
    )


def test_identity_differs_by_tenant_key_and_instant() -> None:
    ids = {
        occurrence_id("", "a", INSTANT),
        occurrence_id("t1", "a", INSTANT),
        occurrence_id("", "b", INSTANT),
        occurrence_id("", "a", INSTANT + timedelta(microseconds=1)),
        # Text that looks like a separator must not make two different pairs collide.
        occurrence_id("x", '","y', INSTANT),
        occurrence_id('x","', "y", INSTANT),
    }
    assert len(ids) == 6


def test_identity_ignores_the_zone_the_instant_is_written_in() -> None:
    shifted = INSTANT.astimezone(timezone(timedelta(hours=13, minutes=45)))
    assert occurrence_id("", "k", shifted) == occurrence_id("", "k", INSTANT)


def test_naive_instant_is_refused() -> None:
    with pytest.raises(ValueError, match="scheduled_at must be an aware datetime"):
        occurrence_id("", "k", datetime(2026, 1, 1, 9, 0))  # noqa: DTZ001
