"""Counting a timing's instants without listing them: exactly what listing would give."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from django_jobs.scheduling import cron as cronlib
from django_jobs.scheduling.timings import cron

# Zones with the transitions that make counting hard: 1-hour DST both ways, a 30-minute DST
# (Lord Howe), DST at midnight (Santiago), a skipped calendar day (Apia, December 2011), and
# a zone without transitions.
ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Apia",
    "Asia/Kolkata",
]
EXPRESSIONS = [  # (per minute: see the last test; listing it here would cost minutes)
    "*/7 * * * *",
    "30 2 * * *",
    "0,30 1-3 * * *",
    "0 0 * * *",
    "15 9 1-7 * 1",
    "59 23 L * *",
    "0 12 29 2 *",
]


def listed(timing, start: datetime, end: datetime) -> int:
    """The reference: every instant listed, a month at a time."""
    total = 0
    while start < end:
        stop = min(end, start + timedelta(days=30))
        total += len(timing.between(start, stop))
        start = stop
    return total


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(
    expr=st.sampled_from(EXPRESSIONS),
    zone=st.sampled_from(ZONES),
    skipped=st.sampled_from(["shift", "skip"]),
    repeated=st.sampled_from(["first", "last", "both"]),
    start=st.datetimes(
        min_value=datetime(2010, 1, 1),  # noqa: DTZ001 (naive: hypothesis' bounds)
        max_value=datetime(2030, 1, 1),  # noqa: DTZ001
    ),
    span=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=75)),
)
def test_counting_a_cron_gives_what_listing_gives(expr, zone, skipped, repeated, start, span):
    timing = cron(expr, zone=zone, skipped=skipped, repeated=repeated, reason="counting")
    start = start.replace(tzinfo=UTC)
    assert timing.count_between(start, start + span) == listed(timing, start, start + span)


@pytest.mark.slow
def test_counting_crosses_a_skipped_calendar_day_and_both_dst_changes_of_a_year() -> None:
    timing = cron("*/10 * * * *", zone="Pacific/Apia", skipped="shift", repeated="both", reason="x")
    start, end = datetime(2011, 1, 1, tzinfo=UTC), datetime(2012, 6, 1, tzinfo=UTC)
    assert timing.count_between(start, end) == listed(timing, start, end)


def test_counting_walks_matching_days_not_every_minute(monkeypatch) -> None:
    """A per-minute expression over ten years: a croniter step per day, not 5.2 million."""
    steps = 0

    class Counted(croniter):  # type: ignore[misc]
        def get_next(self, *args, **kwargs):
            nonlocal steps
            steps += 1
            return super().get_next(*args, **kwargs)

    monkeypatch.setattr(cronlib, "croniter", Counted)
    start = datetime(2015, 1, 1, 0, 0, 30, tzinfo=UTC)
    total = cron("* * * * *").count_between(start, start + timedelta(days=3652))
    assert total == 3652 * 1440
    assert steps <= 3653 + 2 * 1440  # a step per day (and at most two listed partial days)
