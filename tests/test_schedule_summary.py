"""The schedule page as a summary (``services.schedule_summary``): the timing in words, the
next runs with DST marked, policies, recent occurrences with lateness and duration.

The next runs of the example's ``billing.nightly-statements`` across New York's 2027 DST
changes are checked against instants written out by hand (as tests/test_dst_end_to_end.py
and tests/scheduling/test_dst_transitions.py do), never computed by the code under test:
New York springs forward on 2027-03-14 at 02:00 EST (07:00Z) and falls back on 2027-11-07 at
02:00 EDT (06:00Z), so 09:00 local is 14:00Z in EST and 13:00Z in EDT.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from django_jobs import services, store
from django_jobs.declarations import declared
from django_jobs.models import Occurrence, Schedule
from django_jobs.permissions import Forbidden
from django_jobs.safe_error import SafeError
from django_jobs.testing import FakeClock, use_clock

from .factories import T0, ScheduleFactory
from .storeutil import claim, plan

pytestmark = pytest.mark.django_db

KEY = "billing.nightly-statements"

# (local in America/New_York, UTC, marks): each run of "0 9 * * *" from 2027-03-10 07:00 EST.
SPRING_NOW = datetime(2027, 3, 10, 12, 0, tzinfo=UTC)
SPRING_RUNS = [
    ("Wed 2027-03-10 09:00:00 EST", "Wed 2027-03-10 14:00:00 UTC", ""),
    ("Thu 2027-03-11 09:00:00 EST", "Thu 2027-03-11 14:00:00 UTC", ""),
    ("Fri 2027-03-12 09:00:00 EST", "Fri 2027-03-12 14:00:00 UTC", ""),
    ("Sat 2027-03-13 09:00:00 EST", "Sat 2027-03-13 14:00:00 UTC", ""),
    ("Sun 2027-03-14 09:00:00 EDT", "Sun 2027-03-14 13:00:00 UTC", "DST starts: -05:00 → -04:00"),
    ("Mon 2027-03-15 09:00:00 EDT", "Mon 2027-03-15 13:00:00 UTC", ""),
    ("Tue 2027-03-16 09:00:00 EDT", "Tue 2027-03-16 13:00:00 UTC", ""),
    ("Wed 2027-03-17 09:00:00 EDT", "Wed 2027-03-17 13:00:00 UTC", ""),
    ("Thu 2027-03-18 09:00:00 EDT", "Thu 2027-03-18 13:00:00 UTC", ""),
    ("Fri 2027-03-19 09:00:00 EDT", "Fri 2027-03-19 13:00:00 UTC", ""),
]
# From 2027-11-03 08:00 EDT.
AUTUMN_NOW = datetime(2027, 11, 3, 12, 0, tzinfo=UTC)
AUTUMN_RUNS = [
    ("Wed 2027-11-03 09:00:00 EDT", "Wed 2027-11-03 13:00:00 UTC", ""),
    ("Thu 2027-11-04 09:00:00 EDT", "Thu 2027-11-04 13:00:00 UTC", ""),
    ("Fri 2027-11-05 09:00:00 EDT", "Fri 2027-11-05 13:00:00 UTC", ""),
    ("Sat 2027-11-06 09:00:00 EDT", "Sat 2027-11-06 13:00:00 UTC", ""),
    ("Sun 2027-11-07 09:00:00 EST", "Sun 2027-11-07 14:00:00 UTC", "DST ends: -04:00 → -05:00"),
    ("Mon 2027-11-08 09:00:00 EST", "Mon 2027-11-08 14:00:00 UTC", ""),
    ("Tue 2027-11-09 09:00:00 EST", "Tue 2027-11-09 14:00:00 UTC", ""),
    ("Wed 2027-11-10 09:00:00 EST", "Wed 2027-11-10 14:00:00 UTC", ""),
    ("Thu 2027-11-11 09:00:00 EST", "Thu 2027-11-11 14:00:00 UTC", ""),
    ("Fri 2027-11-12 09:00:00 EST", "Fri 2027-11-12 14:00:00 UTC", ""),
]

_ROW = re.compile(r'<tr class="jobs-run">(.*?)</tr>', re.S)
_CELL = re.compile(r'<td class="jobs-run-(local|utc|marks)">(.*?)</td>', re.S)
_TAG = re.compile(r"<[^>]+>")


def listed_runs(page: str) -> list[tuple[str, str, str]]:
    """The (local, UTC, marks) cells of the page's next-runs table."""
    rows = []
    for row in _ROW.findall(page):
        cells = {name: _TAG.sub("", text).strip() for name, text in _CELL.findall(row)}
        rows.append((cells["local"], cells["utc"], cells["marks"]))
    return rows


@pytest.fixture
def nightly() -> Schedule:
    """The example project's declaration, written by a sync as a replica writes it."""
    (declaration,) = [d for d in declared.all() if d.key == KEY]
    services.sync_schedules([declaration], now=datetime(2027, 1, 1, tzinfo=UTC))
    return Schedule.objects.get(tenant="", key=KEY)


def page_at(client: Client, schedule: Schedule, now: datetime) -> str:
    with use_clock(FakeClock(now)):
        response = client.get(reverse("admin:django_jobs_schedule_change", args=[schedule.pk]))
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.parametrize(
    ("now", "expected"),
    [(SPRING_NOW, SPRING_RUNS), (AUTUMN_NOW, AUTUMN_RUNS)],
    ids=["spring", "autumn"],
)
def test_the_nightly_statements_page_lists_its_next_runs_across_new_yorks_dst_changes(
    root_client, nightly, now, expected
) -> None:
    page = page_at(root_client, nightly, now)
    assert listed_runs(page) == expected


def test_the_nightly_statements_page_says_when_it_runs_in_words(root_client, nightly) -> None:
    page = page_at(root_client, nightly, SPRING_NOW)
    assert "daily at 09:00 America/New_York" in page
    assert "13:00 or 14:00 UTC depending on DST" in page
    assert "a skipped 09:00 shifts to the first instant after the gap" in page
    assert "a repeated 09:00 runs once, at its first instance" in page
    assert "clocks change 2027-03-14 02:00 → 03:00 and 2027-11-07 02:00 → 01:00" in page
    policies = page[page.index("jobs-policies") :]
    assert "replay once" in policies
    assert "up to 5 attempts, backoff 30 seconds doubling to at most 10 minutes" in policies
    assert "finished occurrences kept for 90 days" in policies
    assert "team-billing" in page


def test_the_records_fields_stay_on_the_page_below_the_summary(root_client, nightly) -> None:
    page = page_at(root_client, nightly, SPRING_NOW)
    below = page[page.index('<div class="jobs-record">') :]
    assert page.index("jobs-next-runs") < page.index('<div class="jobs-record">')
    assert "field-zone_reason" in below
    assert "field-arguments" in below


def test_a_user_without_view_permission_is_refused(nightly) -> None:
    stranger = User.objects.create_user("stranger", password="pw", is_staff=True)
    with pytest.raises(
        Forbidden, match=re.escape("stranger may not view schedule billing.nightly-statements")
    ):
        services.schedule_summary(nightly, actor=stranger, now=SPRING_NOW)


def test_recent_occurrences_show_lateness_from_the_first_attempt_and_duration(clock) -> None:
    """Lateness is the first attempt's start less the scheduled instant (a retry's backoff is
    not lateness); duration is the latest attempt's run."""
    root = User.objects.create_superuser("root", "r@example.com", "pw")
    schedule = ScheduleFactory.create(max_attempts=3)
    plan(schedule, T0, now=T0)
    (lease,) = claim("w", T0 + timedelta(seconds=7))  # 7 s late
    retry_at = T0 + timedelta(minutes=1)
    store.fail(
        lease, now=T0 + timedelta(seconds=9), error=SafeError("OSError", "disk"), retry_at=retry_at
    )
    (lease,) = claim("w", retry_at)
    store.complete([lease], now=retry_at + timedelta(minutes=2, seconds=5))
    occurrence = Occurrence.objects.get(schedule=schedule)

    (recent,) = services.schedule_summary(schedule, actor=root, now=clock.now()).recent
    assert recent.occurrence.pk == occurrence.pk
    assert recent.lateness == timedelta(seconds=7)
    assert recent.duration == timedelta(minutes=2, seconds=5)
    assert (recent.lateness_words, recent.duration_words) == ("7 s", "2 min 5 s")
    assert recent.occurrence.attempts == 2
    assert recent.occurrence.last_error_type == "OSError"


def test_recent_occurrences_are_the_newest_twenty_newest_first(clock) -> None:
    root = User.objects.create_superuser("root", "r@example.com", "pw")
    schedule = ScheduleFactory.create()
    instants = [T0 + timedelta(minutes=n) for n in range(25)]
    for instant in instants:
        plan(schedule, instant, now=instant)
    summary = services.schedule_summary(schedule, actor=root, now=clock.now())
    assert [r.occurrence.scheduled_at for r in summary.recent] == instants[::-1][:20]
    assert all(r.lateness is None and r.duration is None for r in summary.recent)
    assert {r.lateness_words for r in summary.recent} == {"-"}


def test_each_recent_occurrence_links_to_its_page(root_client, clock) -> None:
    schedule = ScheduleFactory.create()
    plan(schedule, T0, now=T0)
    occurrence = Occurrence.objects.get(schedule=schedule)
    page = page_at(root_client, schedule, clock.now())
    link = reverse("admin:django_jobs_occurrence_change", args=[occurrence.pk])
    assert f'<a href="{link}">Sun 2026-03-01 12:00:00 UTC</a>' in page


def test_jobs_inspect_prints_the_same_words_and_marked_runs(nightly) -> None:
    User.objects.create_superuser("ops", "ops@example.com", "pw")
    out = StringIO()
    with use_clock(FakeClock(SPRING_NOW)):
        call_command("jobs", "inspect", KEY, "--actor", "ops", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["timing_in_words"].startswith(
        "daily at 09:00 America/New_York (13:00 or 14:00 UTC depending on DST)"
    )
    assert [
        (r["local_words"], r["utc_words"], " ".join(r["marks"])) for r in data["next_runs"]
    ] == SPRING_RUNS
    assert "next_runs_in_zone" not in data  # one field, the admin's runs
    out = StringIO()
    with use_clock(FakeClock(SPRING_NOW)):
        call_command("jobs", "inspect", KEY, "--actor", "ops", stdout=out)
    local, utc, mark = SPRING_RUNS[4]  # the run DST starts before, marked
    assert f"  {local} = {utc}  [{mark}]" in out.getvalue().splitlines()
