"""The words of durations and instants (``django_jobs.words``), as every page and the CLI's
text show them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from django_jobs import words


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "-"),
        (timedelta(0), "0 ms"),
        (timedelta(milliseconds=43.2), "43 ms"),
        (timedelta(seconds=0.9996), "1 s"),
        (timedelta(seconds=2.54), "2.5 s"),
        (timedelta(seconds=9.96), "10 s"),
        (timedelta(seconds=43.031415), "43 s"),
        (timedelta(seconds=85.681976), "1 min 26 s"),  # was 0:01:25.681976
        (timedelta(seconds=120), "2 min"),
        (timedelta(hours=2, minutes=3, seconds=4), "2 h 3 min"),
        (timedelta(days=1, hours=4, minutes=59), "1 d 4 h"),
        (timedelta(seconds=-3), "-3 s"),
        (0.25, "250 ms"),
    ],
)
def test_a_duration_reads_in_words(value, shown):
    assert words.duration(value) == shown


def test_an_instant_reads_to_the_second_in_utc_whatever_its_zone():
    berlin = timezone(timedelta(hours=1))
    assert words.instant(datetime(2026, 12, 2, 15, 40, 7, 900, tzinfo=berlin)) == (
        "2026-12-02 14:40:07 UTC"
    )
    assert words.instant(datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)) == (
        "9999-12-31 23:59:59 UTC"
    )
    assert words.instant(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01 00:00:00 UTC"
    assert words.instant(None) == "-"


def test_an_exact_instant_keeps_its_microseconds_only_when_it_has_some():
    moment = datetime(2026, 12, 7, 6, 30, 34, 341454, tzinfo=UTC)
    assert words.instant(moment, exact=True) == "2026-12-07 06:30:34.341454 UTC"
    assert words.instant(moment.replace(microsecond=0), exact=True) == "2026-12-07 06:30:34 UTC"
