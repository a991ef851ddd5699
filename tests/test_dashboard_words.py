"""The dashboard in an operator's words (issue #37): every duration as ``1 min 26 s`` or
``43 ms`` (``django_jobs.words.duration``), never Python's ``0:01:25.680000``; every instant to
the second with its zone, ``2026-03-01 12:00:07 UTC`` (``words.instant``), never Django's
localised date nor a time without its zone. Through Django's test client on PostgreSQL, at a
fake clock's instant with seconds in it (TIME_ZONE is Pacific/Chatham in the tests: nothing
here may read it)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse

from django_jobs import store
from django_jobs.models import Replica, Schedule
from django_jobs.safe_error import SafeError
from django_jobs.testing import FakeClock, use_clock

from .factories import T0, ScheduleFactory
from .storeutil import claim, plan

pytestmark = pytest.mark.django_db

NOW = T0 + timedelta(seconds=7, milliseconds=250)  # 2026-03-01 12:00:07.25 UTC
# A timedelta's str() ("0:01:25.680000", "1 day, 0:00:04"): H:MM:SS not the time of a date.
TIMEDELTA_TEXT = re.compile(r"(?<!-\d\d )\b\d+:\d\d:\d\d")
INSTANT = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"


def finished(schedule: Schedule, lates: list[timedelta]) -> None:
    """One completed occurrence of ``schedule`` per entry of ``lates``, an hour apart ending an
    hour before NOW, each started that much after its scheduled instant."""
    for n, late in enumerate(lates):
        at = NOW - timedelta(hours=len(lates) - n)
        plan(schedule, at, now=at)
        (lease,) = claim("w", at + late)
        store.mark_started([lease], now=at + late)
        store.complete([lease], now=at + late + timedelta(seconds=1))


def dashboard(client: Client) -> str:
    with use_clock(FakeClock(NOW)):
        response = client.get(reverse("admin:django_jobs_dashboard"))
    assert response.status_code == 200
    return response.content.decode()


def text(html: str) -> str:
    """``html`` without its tags, each run of white space one space."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def cells(page: str, label: str) -> list[str]:
    """The cells of the dashboard's line of schedule ``label``."""
    for row in re.findall(r'<tr class="jobs-line">(.*?)</tr>', page, re.S):
        found = [text(c) for c in re.findall(r"<td.*?>(.*?)</td>", row, re.S)]
        if found[0].startswith(label):
            return found
    raise AssertionError(f"no line of {label} on the dashboard")


def test_the_dashboard_says_each_duration_in_words(root_client) -> None:
    """The oldest due occurrence's wait, each schedule's start lateness p50 / p99 and each
    replica's heartbeat age read as words; a schedule with no start in the window reads -."""
    late = ScheduleFactory.create(tenant="acme", key="a.late")
    ScheduleFactory.create(tenant="acme", key="a.quiet")
    # percentile_cont over 43 ms, 43 ms, 100.043 s: p50 43 ms, p99 0.043 + 0.98 * 100 = 98.043 s.
    ms43 = timedelta(milliseconds=43)
    finished(late, [ms43, ms43, timedelta(seconds=100, milliseconds=43)])
    plan(late, NOW - timedelta(seconds=85.68), now=NOW)  # due 85.68 s ago, not started
    Replica.objects.create(
        id="r1", host="h", pid=1, heartbeat_at=NOW - timedelta(seconds=12.4), started_at=T0
    )

    page = dashboard(root_client)

    assert re.findall(r'id="jobs-due-age"><strong>(.*?)</strong>', page) == ["1 min 26 s"]
    assert cells(page, "acme/a.late")[5] == "43 ms / 1 min 38 s"
    assert cells(page, "acme/a.quiet")[5] == "-"
    (replica,) = re.findall(r"<tr><td>r1</td>(.*?)</tr>", page, re.S)
    assert [text(c) for c in re.findall(r"<td.*?>(.*?)</td>", replica, re.S)][4] == "12 s"
    # No duration anywhere as Python's str() of a timedelta.
    assert "0:01:25" not in page
    assert TIMEDELTA_TEXT.search(page) is None, TIMEDELTA_TEXT.search(page)


def test_the_dashboard_says_each_instant_to_the_second_in_utc(root_client) -> None:
    """The window's bounds, each schedule's next run, each replica's last heartbeat and the
    chart's bars and axis read ``YYYY-MM-DD HH:MM:SS UTC``, in UTC whatever TIME_ZONE is."""
    hourly = ScheduleFactory.create(
        tenant="acme",
        key="a.hourly",
        interval=timedelta(hours=1),
        anchor=T0 + timedelta(seconds=37),
    )
    finished(hourly, [timedelta(seconds=2)])
    Replica.objects.create(
        id="r1", host="h", pid=1, heartbeat_at=NOW - timedelta(seconds=12.4), started_at=T0
    )

    page = dashboard(root_client)
    words = text(page)

    assert "from 2026-02-28 12:00:07 UTC to 2026-03-01 12:00:07 UTC" in words
    assert cells(page, "acme/a.hourly")[6] == "2026-03-01 12:00:37 UTC"
    (replica,) = re.findall(r"<tr><td>r1</td>(.*?)</tr>", page, re.S)
    assert [text(c) for c in re.findall(r"<td.*?>(.*?)</td>", replica, re.S)][3] == (
        "2026-03-01 11:59:54 UTC"
    )
    chart = page.split('id="jobs-chart"')[1].split("</svg>")[0]
    # The one completed occurrence, scheduled at 11:00:07.25, opens its 30-minute bucket (the
    # 24h window's 48 buckets start at NOW - 24 h).
    assert re.findall(r"<title>(.*?)</title>", chart) == [
        "2026-03-01 11:00:07 UTC to 2026-03-01 11:30:07 UTC: 1 completed"
    ]
    axis = re.findall(r'<text x="(?:40|960)"[^>]*>(.*?)</text>', chart)
    assert axis == ["2026-02-28 12:00:07 UTC", "2026-03-01 12:00:07 UTC"]
    assert all(re.fullmatch(INSTANT, a) for a in axis)


def test_a_schedule_no_replica_runs_has_no_next_run(root_client) -> None:
    """A disabled, draft or retired schedule shows ``-``: no replica runs it, whatever its
    timing says."""
    for key, fields in (
        ("off", {"enabled": False, "disabled_reason": "maintenance"}),
        ("draft", {"status": "draft", "decider": "ops", "decide_by": NOW.date()}),
    ):
        ScheduleFactory.create(tenant="acme", key=key, interval=timedelta(seconds=30), **fields)
    page = dashboard(root_client)
    assert cells(page, "acme/off")[6] == "-"
    assert cells(page, "acme/draft")[6] == "-"


def test_start_lateness_is_the_first_starts_not_a_retrys_or_a_replays(root_client) -> None:
    """The dashboard's start lateness is what the schedule page and the occurrence page call
    lateness: from the scheduled instant to the first start. A run retried after its backoff,
    or replayed by an operator an hour later, is not an hour late."""
    schedule = ScheduleFactory.create(tenant="acme", key="a.retried", max_attempts=3)
    finished(schedule, [timedelta(seconds=2)])  # on time: 2 s
    at = NOW - timedelta(minutes=30)
    plan(schedule, at, now=at)
    (first,) = claim("w", at + timedelta(seconds=2))
    store.mark_started([first], now=at + timedelta(seconds=2))
    store.fail(first, now=at + timedelta(seconds=3), error=SafeError("E", "x"), retry_at=at)
    (second,) = claim("w", at + timedelta(minutes=20))  # its retry, 20 min after the instant
    store.mark_started([second], now=at + timedelta(minutes=20))
    store.complete([second], now=at + timedelta(minutes=20, seconds=1))
    assert cells(dashboard(root_client), "acme/a.retried")[5] == "2 s / 2 s"
