"""The occurrences list in a real browser (Playwright driving Debian's Chromium): filtered by
state from the filter panel, then searched by a schedule's key from the search box."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User

from .factories import ScheduleFactory, dead_occurrence
from .storeutil import plan
from .test_browser import SHOTS, login, page, server  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

ROW = re.compile(r"/admin/django_jobs/occurrence/([0-9a-f-]{36})/change/")


def shown(page) -> list[str]:  # noqa: F811
    """The occurrence ids of the list's rows, in order."""
    links = page.eval_on_selector_all(
        "#result_list tbody th a", "links => links.map(a => a.getAttribute('href'))"
    )
    return [found.group(1) for href in links if (found := ROW.search(href))]


def test_filter_the_occurrences_by_state_then_search_by_key(page, server) -> None:  # noqa: F811
    User.objects.create_superuser("root", "root@example.com", "pw")
    nightly = ScheduleFactory.create(tenant="acme", key="billing.nightly")
    weekly = ScheduleFactory.create(tenant="acme", key="reports.weekly")
    now = datetime.now(UTC).replace(microsecond=0)
    plan(nightly, now + timedelta(minutes=1), now + timedelta(minutes=2), now=now)
    older = dead_occurrence(weekly, now - timedelta(hours=2))
    newer = dead_occurrence(nightly, now - timedelta(hours=1))

    login(page, server, "root", "pw")
    page.goto(f"{server.url}/admin/django_jobs/occurrence/")
    assert len(shown(page)) == 4
    page.click("#changelist-filter a[href*='state__exact=dead']")
    page.wait_for_url("**state__exact=dead**")
    assert shown(page) == [str(newer.pk), str(older.pk)]  # newest first
    assert "2 occurrences" in page.inner_text(".paginator")

    page.fill("#searchbar", "weekly")
    page.press("#searchbar", "Enter")
    page.wait_for_url("**q=weekly**")
    assert shown(page) == [str(older.pk)]
    assert "state__exact=dead" in page.url  # the search kept the filter
    page.screenshot(path=str(SHOTS / "admin-occurrences-filtered.png"), full_page=True)
