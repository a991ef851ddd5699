"""The README's quick start, as a new user types it, followed by the deploy's next commands.

Real ``manage.py`` processes with the example project's settings, on a database of the test's
own (created on the server the suite uses, dropped afterwards).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from .processes import ROOT, database_url

pytestmark = [pytest.mark.django_db, pytest.mark.processes]


@pytest.fixture
def fresh_database() -> Iterator[str]:
    """The URL of an empty database on the test server."""
    name = f"quickstart_{uuid.uuid4().hex[:10]}"
    admin_url = database_url({**connection.settings_dict, "NAME": "postgres"})
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url({**connection.settings_dict, "NAME": name})
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def manage(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "example_project.settings", "DATABASE_URL": url}
    return subprocess.run(
        [sys.executable, "-W", "ignore", str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_after_the_quick_start_migrate_and_the_database_checks_pass(fresh_database) -> None:
    for step in (
        ("migrate", "-v0"),
        ("billing_operator",),  # the user billing_enable_tenant acts as
        ("billing_enable_tenant", "acme", "--zone", "Europe/Berlin"),
        ("runworker", "--once"),
    ):
        done = manage(fresh_database, *step)
        assert done.returncode == 0, f"{step}: {done.stdout}{done.stderr}"
    # The deploy's next commands: both run the database checks (E017 among them) on records
    # the app wrote itself, the run-time schedule of billing_enable_tenant included.
    again = manage(fresh_database, "migrate", "-v0")
    assert again.returncode == 0, again.stdout + again.stderr
    checked = manage(fresh_database, "check", "--database", "default")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "System check identified no issues" in checked.stdout
    with psycopg.connect(fresh_database) as db:
        kinds: list[tuple[str, int]] = db.execute(
            "SELECT s.tenant || '/' || s.key, count(r.id) FROM django_jobs_schedule s "
            "LEFT JOIN django_jobs_runbook r ON r.schedule_id = s.id GROUP BY 1"
        ).fetchall()
    books = dict(kinds)
    assert books["acme/billing.tenant-statements"] == 3
    assert set(books.values()) == {3}
