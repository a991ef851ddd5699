"""Timings in words (``timing_words``, ``cron_words``) and their next runs marked
(``upcoming``), for every timing kind. Pure: ``now`` is passed in. Expected instants and
offsets are written out by hand from the zones' 2027 rules (New York: 2027-03-14 02:00 EST ->
03:00 EDT at 07:00Z, 2027-11-07 02:00 EDT -> 01:00 EST at 06:00Z; Berlin: 2027-03-28 02:00 CET
-> 03:00 CEST, 2027-10-31 03:00 CEST -> 02:00 CET).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_jobs import after, at, cron, every
from django_jobs.scheduling import cron_words, rrules, timing_words, upcoming

NY = "America/New_York"
MARCH = datetime(2027, 3, 10, 12, 0, tzinfo=UTC)
NOVEMBER = datetime(2027, 11, 5, 0, 0, tzinfo=UTC)


def words(timing, now=MARCH) -> str:
    return timing_words.describe(timing.validate(), now=now).text


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("0 9 * * *", "daily at 09:00"),
        ("30 17 * * 1-5", "on weekdays at 17:30"),
        ("0 9,17 1,15 * *", "monthly on the 1st and the 15th at 09:00 and 17:00"),
        ("0 6 L * *", "monthly on the last day at 06:00"),
        ("30 8 * 1,7 0", "in January and July on Sunday at 08:30"),
        ("0 9 1 * 1", "on the 1st or on Monday at 09:00"),
        ("*/15 * * * *", "every 15 minutes"),
        ("* * * * *", "every minute"),
        ("5 * * * *", "at :05 past every hour"),
        ("0 */2 * * *", "every 2 hours at :00"),
        ("* 9 * * *", "every minute from 09:00 to 09:59"),
        ("@daily", "daily at 00:00"),
        ("0 9 * * 5#2", "when cron '0 9 * * 5#2' matches"),
    ],
)
def test_a_cron_expression_in_words(expr, expected) -> None:
    assert cron_words.describe(expr).text == expected


def test_a_local_cron_in_its_zone_in_utc_and_its_dst_rules() -> None:
    timing = cron("0 9 * * *", zone=NY, skipped="shift", repeated="first", reason="r")
    assert words(timing) == (
        "daily at 09:00 America/New_York (13:00 or 14:00 UTC depending on DST); "
        "a skipped 09:00 shifts to the first instant after the gap; "
        "a repeated 09:00 runs once, at its first instance "
        "(clocks change 2027-03-14 02:00 → 03:00 and 2027-11-07 02:00 → 01:00)"
    )


def test_the_other_dst_choices_in_words() -> None:
    timing = cron("0 21 * * *", zone=NY, skipped="skip", repeated="both", reason="r")
    assert words(timing).startswith(
        "daily at 21:00 America/New_York (01:00 (+1 day) or 02:00 (+1 day) UTC depending on "
        "DST); a skipped 21:00 does not run that day; a repeated 21:00 runs twice, at both "
        "instances"
    )
    last = cron("30 1 * * *", zone=NY, skipped="shift", repeated="last", reason="r")
    assert "a repeated 01:30 runs once, at its second instance" in words(last)


def test_several_times_of_day_in_utc_per_offset() -> None:
    timing = cron("0 9,17 * * *", zone=NY, skipped="shift", repeated="first", reason="r")
    assert timing_words.describe(timing.validate(), now=MARCH).in_utc == (
        "in UTC: 14:00 and 22:00 at UTC-05:00; 13:00 and 21:00 at UTC-04:00"
    )


def test_a_zone_without_clock_changes_says_so() -> None:
    timing = cron("0 9,17 * * *", zone="Asia/Kolkata", reason="r")
    assert words(timing) == (
        "daily at 09:00 and 17:00 Asia/Kolkata (03:30 and 11:30 UTC); "
        "Asia/Kolkata does not change its clocks in the coming year"
    )


def test_a_utc_cron_has_no_dst_words() -> None:
    assert words(cron("*/5 * * * *")) == "every 5 minutes UTC"


def test_a_calendar_rule_in_words_with_its_zone_and_utc() -> None:
    timing = rrules.rrule(
        "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=18;BYMINUTE=0",
        zone="Europe/Berlin",
        skipped="skip",
        repeated="last",
        reason="r",
    )
    assert words(timing) == (
        "monthly on the last weekday at 18:00 Europe/Berlin (16:00 or 17:00 UTC depending on "
        "DST); a skipped 18:00 does not run that day; a repeated 18:00 runs once, at its second "
        "instance (clocks change 2027-03-28 02:00 → 03:00 and 2027-10-31 03:00 → 02:00)"
    )


def test_elapsed_and_one_off_timings_in_words() -> None:
    assert words(every(timedelta(seconds=10))) == (
        "every 10 seconds of elapsed time, counted from 1970-01-01 00:00:00 UTC "
        "(UTC: zones and DST do not apply)"
    )
    assert words(every(timedelta(hours=1, minutes=30))).startswith(
        "every 1 hour 30 minutes of elapsed time"
    )
    assert words(at(datetime(2027, 4, 1, 6, 30, tzinfo=UTC))) == "once, at 2027-04-01 06:30:00 UTC"
    created = after(timedelta(minutes=5)).created(MARCH)
    assert (
        words(created) == "once, 5 minutes after the record was created: at 2027-03-10 12:05:00 UTC"
    )


def rows(runs) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(r.local_words, r.utc_words, r.marks) for r in runs]


def test_a_shifted_run_and_the_start_of_dst_are_marked() -> None:
    timing = cron("30 2 * * *", zone=NY, skipped="shift", repeated="first", reason="r").validate()
    assert rows(upcoming.next_runs(timing, now=MARCH, count=5)) == [
        ("Thu 2027-03-11 02:30:00 EST", "Thu 2027-03-11 07:30:00 UTC", ()),
        ("Fri 2027-03-12 02:30:00 EST", "Fri 2027-03-12 07:30:00 UTC", ()),
        ("Sat 2027-03-13 02:30:00 EST", "Sat 2027-03-13 07:30:00 UTC", ()),
        (
            "Sun 2027-03-14 03:00:00 EDT",
            "Sun 2027-03-14 07:00:00 UTC",
            (
                "DST starts: -05:00 → -04:00",
                "shifted: a skipped local time (DST gap) runs at 03:00",
            ),
        ),
        ("Mon 2027-03-15 02:30:00 EDT", "Mon 2027-03-15 06:30:00 UTC", ()),
    ]


def test_a_run_at_the_jump_that_was_not_shifted_is_not_marked_shifted() -> None:
    timing = cron("0 3 * * *", zone=NY, skipped="shift", repeated="first", reason="r").validate()
    sunday = upcoming.next_runs(timing, now=MARCH, count=5)[3]
    assert sunday.local_words == "Sun 2027-03-14 03:00:00 EDT"
    assert sunday.marks == ("DST starts: -05:00 → -04:00",)


def test_both_instances_of_a_repeated_time_and_the_end_of_dst_are_marked() -> None:
    timing = cron("30 1 * * *", zone=NY, skipped="shift", repeated="both", reason="r").validate()
    assert rows(upcoming.next_runs(timing, now=NOVEMBER, count=5)) == [
        ("Fri 2027-11-05 01:30:00 EDT", "Fri 2027-11-05 05:30:00 UTC", ()),
        ("Sat 2027-11-06 01:30:00 EDT", "Sat 2027-11-06 05:30:00 UTC", ()),
        (
            "Sun 2027-11-07 01:30:00 EDT",
            "Sun 2027-11-07 05:30:00 UTC",
            ("01:30 happens twice: this is the first (EDT)",),
        ),
        (
            "Sun 2027-11-07 01:30:00 EST",
            "Sun 2027-11-07 06:30:00 UTC",
            ("DST ends: -04:00 → -05:00", "01:30 happens twice: this is the second (EST)"),
        ),
        ("Mon 2027-11-08 01:30:00 EST", "Mon 2027-11-08 06:30:00 UTC", ()),
    ]


def test_a_monthly_rule_shows_ten_runs_ten_months_ahead() -> None:
    timing = rrules.rrule("FREQ=MONTHLY;BYMONTHDAY=1;BYHOUR=6", zone=NY, reason="r").validate()
    runs = upcoming.next_runs(timing, now=MARCH)
    assert [r.local_words for r in runs] == [
        f"{day} 2027-{month:02d}-01 06:00:00 {'EDT' if month < 12 else 'EST'}"
        for day, month in [
            ("Thu", 4),
            ("Sat", 5),
            ("Tue", 6),
            ("Thu", 7),
            ("Sun", 8),
            ("Wed", 9),
            ("Fri", 10),
            ("Mon", 11),
            ("Wed", 12),
        ]
    ] + ["Sat 2028-01-01 06:00:00 EST"]
    assert runs[7].marks == ()  # 1 November is still EDT
    assert runs[8].marks == ("DST ends: -04:00 → -05:00",)


def test_the_search_for_runs_is_bounded_by_its_horizon() -> None:
    once = at(datetime(2040, 1, 1, tzinfo=UTC)).validate()
    assert upcoming.next_runs(once, now=MARCH) == []
    assert [
        r.utc_words for r in upcoming.next_runs(once, now=MARCH, horizon=timedelta(days=20 * 366))
    ] == ["Sun 2040-01-01 00:00:00 UTC"]


def test_an_interval_lists_its_next_ten_instants_in_utc() -> None:
    runs = upcoming.next_runs(every(timedelta(seconds=10)).validate(), now=MARCH)
    assert [r.at for r in runs] == [MARCH + timedelta(seconds=10 * n) for n in range(10)]
    assert all(r.marks == () for r in runs)
