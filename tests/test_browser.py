"""Real-browser tests of the admin console: Playwright driving Debian's Chromium.

Chromium comes from Debian (``apt-get install chromium``; ``.ci/run`` installs it), never from
``playwright install``. Without it these tests are skipped, unless JOBS_REQUIRE_BROWSER is set
(CI sets it), in which case they fail. With JOBS_SCREENSHOTS=1 they refresh the screenshots
of docs/operations.md in docs/img/.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User
from django.db import connections

from django_jobs import enqueue, runbooks, services
from django_jobs.models import Attempt, AuditRecord
from django_jobs.permissions import grant_tenant
from django_jobs.registry import Registry
from django_jobs.testing import FakeClock, run_due, use_clock

from .factories import ScheduleFactory, dead_occurrence

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# The screenshots illustrate docs/operations.md; they are rewritten there only when asked
# (JOBS_SCREENSHOTS=1), so an ordinary test run leaves the work tree clean.
SHOTS = (
    Path(__file__).resolve().parent.parent / "docs" / "img"
    if os.environ.get("JOBS_SCREENSHOTS")
    else Path(tempfile.mkdtemp(prefix="django_jobs-screenshots-"))
)

if not Path(CHROMIUM).exists():
    if os.environ.get("JOBS_REQUIRE_BROWSER"):
        raise RuntimeError("JOBS_REQUIRE_BROWSER is set but Debian's chromium is not installed")
    pytest.skip(
        "Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True
    )

sync_api = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


class Server:
    """A live server per test, stopped before the test database is torn down (pytest-django's
    session-wide one can outlive it and hold a connection)."""

    def __init__(self) -> None:
        from django.contrib.staticfiles.handlers import StaticFilesHandler
        from django.test.testcases import LiveServerThread

        self.thread = LiveServerThread("127.0.0.1", StaticFilesHandler, port=0)
        self.thread.daemon = True
        self.thread.start()
        self.thread.is_ready.wait(timeout=30)
        if self.thread.error:
            raise self.thread.error
        self.url = f"http://127.0.0.1:{self.thread.port}"

    def stop(self) -> None:
        if self.thread.is_alive():
            self.thread.terminate()


@pytest.fixture
def server() -> Iterator[Server]:
    server = Server()
    yield server
    server.stop()  # again, harmlessly, if the page fixture already did


@pytest.fixture
def page(monkeypatch, server) -> Iterator:
    # Playwright's sync API runs an event loop in this thread; the ORM calls the test makes
    # meanwhile are ordinary synchronous ones.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        yield context.new_page()
        browser.close()
        # ORM calls made inside Playwright's context ran on a connection of that context:
        # close it here, or it outlives the test and the test database cannot be flushed.
        connections.close_all()
    server.stop()


def login(page, server, username: str, password: str) -> None:
    page.goto(f"{server.url}/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")


def run_action(page, action: str) -> None:
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")  # Django 6.1 renamed the button's text; its name stayed


def acme_nightly():
    schedule = ScheduleFactory.create(tenant="acme", key="billing.nightly", job="billing.heartbeat")
    runbooks.write(schedule)
    return schedule


def test_disable_a_schedule_with_a_reason_and_see_the_audit_record(page, server) -> None:
    User.objects.create_superuser("root", "root@example.com", "pw")
    schedule = acme_nightly()
    login(page, server, "root", "pw")
    page.goto(f"{server.url}/admin/django_jobs/schedule/")
    page.check(f"input[name=_selected_action][value='{schedule.pk}']")
    run_action(page, "disable_schedules")
    page.fill("textarea[name=reason]", "partner outage")
    page.screenshot(path=str(SHOTS / "admin-disable-confirm.png"))
    page.click("input[name=jobs-confirm]")
    assert "Disabled acme/billing.nightly." in page.inner_text(".messagelist")

    page.goto(f"{server.url}/admin/django_jobs/schedule/{schedule.pk}/change/")
    audit = page.inner_text(".jobs-audit")
    assert "root disable: partner outage" in audit
    page.screenshot(path=str(SHOTS / "admin-schedule.png"), full_page=True)
    assert AuditRecord.objects.get(action="disable").actor == "root"


def test_replay_a_dead_occurrence_and_see_the_new_attempt(page, server) -> None:
    User.objects.create_superuser("root", "root@example.com", "pw")
    schedule = acme_nightly()
    now = datetime.now(UTC)
    occurrence = dead_occurrence(
        schedule, now, message="statement template missing", owner="replica-1"
    )

    login(page, server, "root", "pw")
    page.goto(f"{server.url}/admin/django_jobs/occurrence/?dead=yes")
    page.screenshot(path=str(SHOTS / "admin-dead-letters.png"))
    page.check(f"input[name=_selected_action][value='{occurrence.pk}']")
    run_action(page, "replay")
    page.fill("textarea[name=reason]", "template restored")
    page.click("input[name=jobs-confirm]")
    assert f"Replayed {occurrence.pk}: attempt 2 is due now." in page.inner_text(".messagelist")

    jobs = Registry()
    jobs.register("billing.heartbeat", lambda run: None)
    run_due(FakeClock(datetime.now(UTC)), jobs=jobs, replica_id="replica-2")
    page.goto(f"{server.url}/admin/django_jobs/occurrence/{occurrence.pk}/change/")
    attempts = page.inner_text("#attempt_history-group")
    assert "replica-2" in attempts
    assert "manual" in attempts
    page.screenshot(path=str(SHOTS / "admin-occurrence.png"), full_page=True)
    assert list(Attempt.objects.values_list("number", "trigger")) == [
        (1, "schedule"),
        (2, "manual"),
    ]


def test_a_restricted_user_does_not_see_another_tenants_schedule(page, server) -> None:
    acme_nightly()
    globex = ScheduleFactory.create(tenant="globex", key="billing.nightly", job="billing.heartbeat")
    alice = User.objects.create_user("alice", password="pw", is_staff=True)
    group = Group.objects.create(name="acme-ops")
    alice.groups.add(group)
    grant_tenant(group, "acme", "view")

    login(page, server, "alice", "pw")
    page.goto(f"{server.url}/admin/django_jobs/schedule/")
    listing = page.inner_text("#result_list")
    assert "acme/billing.nightly" in listing
    assert "globex" not in listing
    page.screenshot(path=str(SHOTS / "admin-tenant-scoped.png"))
    page.goto(f"{server.url}/admin/django_jobs/schedule/{globex.pk}/change/")
    assert "globex/billing.nightly" not in page.content()


def test_an_occurrence_shows_the_arguments_it_ran_with_redacted(page, server) -> None:
    """A run-now with arguments of its own: the occurrence page shows them, a secret in them
    hidden, and the schedule page shows the schedule's."""
    root = User.objects.create_superuser("root", "root@example.com", "pw")
    schedule = ScheduleFactory.create(
        tenant="acme",
        key="billing.statements",
        job="billing.send_statements",  # run-now arguments: a job offered at run time
        args={"copies": 1},
    )
    occurrence = services.run_now(
        schedule,
        actor=root,
        reason="resend to globex",
        now=datetime.now(UTC),
        args={"customer": "globex", "api_token": "tok-9f8e7d"},
    )
    login(page, server, "root", "pw")
    page.goto(f"{server.url}/admin/django_jobs/occurrence/{occurrence.pk}/change/")
    shown = page.inner_text(".field-arguments")
    assert '"customer": "globex"' in shown
    assert '"api_token": "[redacted]"' in shown
    assert "tok-9f8e7d" not in page.content()
    page.goto(f"{server.url}/admin/django_jobs/schedule/{schedule.pk}/change/")
    assert '{"copies": 1}' in page.inner_text(".field-arguments")


def test_enqueued_work_shows_its_arguments_and_result_redacted(page, server, registered) -> None:
    """An enqueued occurrence that ran: its page shows the arguments it ran with and what its
    handler returned, a secret in either hidden."""
    registered("t.invoice", lambda run: {"invoice": 42, "api_token": "tok-result-1"})
    User.objects.create_superuser("root", "root@example.com", "pw")
    clock = FakeClock(datetime.now(UTC))
    with use_clock(clock):
        done = enqueue("t.invoice", args={"order": 7, "password": "pw-args-2"})
        run_due(clock)
    login(page, server, "root", "pw")
    page.goto(f"{server.url}/admin/django_jobs/occurrence/{done.id}/change/")
    arguments = page.inner_text(".field-arguments")
    result = page.inner_text(".field-returned")
    assert '"order": 7' in arguments
    assert '"password": "[redacted]"' in arguments
    assert '"invoice": 42' in result
    assert '"api_token": "[redacted]"' in result
    assert "tok-result-1" not in page.content()
    assert "pw-args-2" not in page.content()
    assert "enqueued" in page.inner_text(".field-trigger")
