"""The schedule page's summary in a real browser (Playwright, Debian's Chromium): the example's
nightly statements run read as words, their next runs with New York's spring DST change
marked, policies and recent occurrences; the record's fields below. With
JOBS_SCREENSHOTS=1 it refreshes docs/img/admin-schedule-summary.png (docs/operations.md).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User

from django_jobs import runbooks, services, store
from django_jobs.declarations import declared
from django_jobs.models import Schedule
from django_jobs.testing import FakeClock, use_clock

from .storeutil import claim, plan
from .test_browser import SHOTS, login, page, server  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

NOW = datetime(2027, 3, 11, 15, 0, tzinfo=UTC)  # 10:00 EST, three days before DST starts


def nightly_statements() -> Schedule:
    """The example's declaration as a sync writes it, with two finished runs behind it."""
    (declaration,) = [d for d in declared.all() if d.key == "billing.nightly-statements"]
    services.sync_schedules([declaration], now=datetime(2027, 1, 1, tzinfo=UTC))
    schedule = Schedule.objects.get(key="billing.nightly-statements")
    runbooks.write(schedule)
    for day in (9, 10):
        at = datetime(2027, 3, day, 14, 0, tzinfo=UTC)
        plan(schedule, at, now=at)
        (lease,) = claim("replica-1", at + timedelta(seconds=day - 6))
        store.complete([lease], now=at + timedelta(seconds=40 + day))
    return schedule


def test_the_schedule_page_reads_as_a_summary(page, server) -> None:  # noqa: F811
    User.objects.create_superuser("root", "root@example.com", "pw")
    schedule = nightly_statements()
    with use_clock(FakeClock(NOW)):
        login(page, server, "root", "pw")
        page.goto(f"{server.url}/admin/django_jobs/schedule/{schedule.pk}/change/")
        when = page.inner_text(".jobs-when")
        runs = page.locator(".jobs-run")
        assert runs.count() == 10
        dst_run = runs.nth(2).inner_text()  # Sunday 2027-03-14, after Friday and Saturday
        recent = page.inner_text(".jobs-recent")
        page.screenshot(path=str(SHOTS / "admin-schedule-summary.png"), full_page=True)
        record = page.inner_text(".jobs-record .field-zone_reason")
    assert "daily at 09:00 America/New_York" in when
    assert "13:00 or 14:00 UTC depending on DST" in when
    assert "Sun 2027-03-14 09:00:00 EDT" in dst_run
    assert "Sun 2027-03-14 13:00:00 UTC" in dst_run
    assert "DST starts: -05:00 → -04:00" in dst_run
    assert "Wed 2027-03-10 14:00:00 UTC" in recent
    assert "4 s" in recent  # started 4 s late
    assert "replay once" in page.inner_text(".jobs-policies")
    assert "statements reach readers in New York" in record  # the record's own fields
