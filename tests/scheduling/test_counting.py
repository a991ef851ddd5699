"""Counting a timing's instants without listing them: exactly what listing would give."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from croniter import croniter
from hypothesis import example, given, settings
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
@example(  # found by Hypothesis: the second pass of Santiago's repeated hour (see below)
    expr="*/7 * * * *",
    zone="America/Santiago",
    skipped="shift",
    repeated="first",
    start=datetime(2016, 5, 15, 3),  # noqa: DTZ001 (naive, as the strategy draws it)
    span=timedelta(microseconds=1),
)
def test_counting_a_cron_gives_what_listing_gives(expr, zone, skipped, repeated, start, span):
    timing = cron(expr, zone=zone, skipped=skipped, repeated=repeated, reason="counting")
    start = start.replace(tzinfo=UTC)
    assert timing.count_between(start, start + span) == listed(timing, start, start + span)


# Offset changes whose skipped and repeated local times run near a window's edges: the instant
# of each change, its size, and the DST policies that decide what runs around it (falling back
# repeats local times, springing forward skips them). Santiago changes at midnight; Berlin and
# New York by an hour at night; Lord Howe by 30 minutes; Troll by 2 hours; Apia skipped a day.
FALLS_BACK = [("shift", "first"), ("shift", "last"), ("shift", "both")]
SPRINGS_FORWARD = [("shift", "first"), ("skip", "first")]
CHANGES = [
    ("America/Santiago", datetime(2016, 5, 15, 3, tzinfo=UTC), timedelta(hours=1), FALLS_BACK),
    ("America/Santiago", datetime(2016, 8, 14, 4, tzinfo=UTC), timedelta(hours=1), SPRINGS_FORWARD),
    ("Europe/Berlin", datetime(2021, 10, 31, 1, tzinfo=UTC), timedelta(hours=1), FALLS_BACK),
    ("Europe/Berlin", datetime(2021, 3, 28, 1, tzinfo=UTC), timedelta(hours=1), SPRINGS_FORWARD),
    ("America/New_York", datetime(2021, 11, 7, 6, tzinfo=UTC), timedelta(hours=1), FALLS_BACK),
    (
        "Australia/Lord_Howe",
        datetime(2021, 4, 3, 15, tzinfo=UTC),
        timedelta(minutes=30),
        FALLS_BACK,
    ),
    (
        "Australia/Lord_Howe",
        datetime(2021, 10, 2, 15, 30, tzinfo=UTC),
        timedelta(minutes=30),
        SPRINGS_FORWARD,
    ),
    ("Antarctica/Troll", datetime(2021, 10, 31, 1, tzinfo=UTC), timedelta(hours=2), FALLS_BACK),
    pytest.param(  # listing near it walks 2 days of wall times: slow (the test below is not)
        "Pacific/Apia",
        datetime(2011, 12, 30, 10, tzinfo=UTC),
        timedelta(days=1),
        SPRINGS_FORWARD,
        marks=pytest.mark.slow,
    ),
]
TICK = timedelta(microseconds=1)
SPANS = [TICK, timedelta(minutes=1), timedelta(hours=1)]


@pytest.mark.parametrize("expr", ["*/7 * * * *", "0,30 * * * *", "30 2 * * *"])
@pytest.mark.parametrize(("zone", "change", "size", "policies"), CHANGES)
def test_a_window_at_the_edges_of_an_offset_change_counts_what_runs_in_it(
    expr, zone, change, size, policies
) -> None:
    """Windows of a microsecond, a minute and an hour starting before, at and after an offset
    change, inside its repeated or skipped local times: counting gives what listing gives,
    and both give the instants a wide listing holds in the window. A window that starts after
    the change yet inside its reach holds no change of its own (found by Hypothesis)."""
    starts = [-size, -size / 2, -TICK, timedelta(0), TICK, size / 2, size - TICK, size]
    wrong = []
    for skipped, repeated in policies:
        timing = cron(expr, zone=zone, skipped=skipped, repeated=repeated, reason="counting")
        wide = timing.between(change - timedelta(days=2), change + timedelta(days=2))
        for start in (change + offset for offset in starts):
            for end in (start + span for span in SPANS):
                runs = sum(1 for instant in wide if start <= instant < end)
                got = (timing.count_between(start, end), len(timing.between(start, end)))
                if got != (runs, runs):
                    wrong.append((skipped, repeated, str(start), str(end - start), got, runs))
    assert wrong == []


def test_the_second_pass_of_a_repeated_hour_counts_only_the_pass_that_runs() -> None:
    """Santiago fell back at midnight on 15 May 2016 (03:00 UTC): 23:00-23:59 came twice.
    With ``repeated="first"`` its second pass (03:00-04:00 UTC) runs nothing; a window inside
    it holds no offset change, and counting took each matching wall time there as one run."""
    change = datetime(2016, 5, 15, 3, tzinfo=UTC)
    first = cron("*/7 * * * *", zone="America/Santiago", skipped="shift", repeated="first")
    last = cron("*/7 * * * *", zone="America/Santiago", skipped="shift", repeated="last")
    assert first.count_between(change, change + TICK) == 0
    assert first.count_between(change, change + timedelta(hours=1)) == 0
    # 23:35 to 00:35 local: the repeated 23:35-23:56 does not run, 00:00-00:28 does.
    assert first.count_between(change + timedelta(minutes=35), change + timedelta(minutes=95)) == 5
    assert last.count_between(change - timedelta(hours=1), change) == 0
    assert last.count_between(change, change + timedelta(hours=1)) == 9


def test_a_window_starting_where_apia_skipped_a_day_holds_the_shifted_run() -> None:
    """Apia went from 29 to 31 December 2011 at 10:00 UTC: 02:30 on the 30th, a day of wall
    time before that instant's, runs there (``skipped="shift"``), in a window that starts
    there as in one that spans it."""
    change = datetime(2011, 12, 30, 10, tzinfo=UTC)
    shift = cron("30 2 * * *", zone="Pacific/Apia", skipped="shift", repeated="first")
    skip = cron("30 2 * * *", zone="Pacific/Apia", skipped="skip", repeated="first")
    assert shift.between(change, change + TICK) == [change]
    assert shift.count_between(change, change + timedelta(hours=1)) == 1
    assert shift.between(change - timedelta(hours=1), change + timedelta(hours=1)) == [change]
    assert skip.between(change, change + timedelta(hours=1)) == []
    assert skip.count_between(change, change + timedelta(hours=1)) == 0


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
