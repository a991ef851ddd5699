"""Issue #35: errors where they belong, and the operator's defaults.

- a database that is not PostgreSQL is refused at once (E001) by ``check``, ``runworker`` and
  ``jobs``, without connecting;
- a ``schedules`` module that fails to import leaves the website up, is check E033 (file,
  line, key, field), and no sync writes the partial declared set;
- a cron error names its field; a ``COMMANDS``/``APPROVED_PORTS`` entry that does not import
  is named (E034); "did you mean" for schedule keys and job names; check messages lead with
  the schedule's key; ``--actor`` defaults to ``CLI_ACTOR``, else the OS user.

The processes here are real ``manage.py`` runs (a SQLite settings module, an app whose
``schedules.py`` raises); Django names the modules by the settings written to ``tmp_path``.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from io import StringIO
from pathlib import Path

import django
import pytest
from django.contrib.auth.models import Group, User
from django.core.checks import run_checks
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_jobs import cron, every, runbooks, schedule
from django_jobs.declarations import declared
from django_jobs.models import AuditRecord, Schedule
from django_jobs.permissions import grant_tenant
from django_jobs.scheduling import cron as cronlib
from django_jobs.testing import FakeClock, use_clock

from .factories import ScheduleFactory
from .processes import database_url

ROOT = Path(__file__).resolve().parent.parent


def os_user() -> str:
    """The OS account running the tests (as ``cli.invocation.os_user`` reads it)."""
    return pwd.getpwuid(os.geteuid()).pw_name


# Long enough for a slow start on two busy cores, far shorter than "hangs forever".
PROMPTLY = 45

SQLITE_SETTINGS = """
SECRET_KEY = "tests-only"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "guardian",
    "django_jobs",
]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": {db!r}}}}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
"""

BROKEN_SETTINGS = """
from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "brokenapp"]
"""

# Line 5 is the schedule() that raises; the one before it is valid and must not be synced.
BROKEN_SCHEDULES = """from django_jobs import cron, schedule
F = dict(job="billing.send_statements", operating_owner="ops", record_owner="ops@example.com")
F.update(status="active", retention=3)
schedule("broken.fine", timing=cron("0 9 * * *"), **F)
schedule("orders.sync", timing=cron("61 * * * *"), **F)
"""


def manage(
    tmp_path: Path, settings: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``manage.py <args>`` under the settings module ``settings`` written in ``tmp_path``;
    ``TimeoutExpired`` if it does not end promptly."""
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": settings,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-W", "ignore", str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=PROMPTLY,
    )


# --- 1. Not PostgreSQL: refused at once ---------------------------------------------------


@pytest.fixture
def sqlite_settings(tmp_path: Path) -> str:
    (tmp_path / "sqlite_settings.py").write_text(
        SQLITE_SETTINGS.format(db=str(tmp_path / "jobs.sqlite3"))
    )
    return "sqlite_settings"


@pytest.mark.processes
@pytest.mark.parametrize(
    "command",
    [["check"], ["runworker", "--once"], ["runworker"], ["jobs", "list", "--actor", "ops"]],
    ids=["check", "runworker-once", "runworker-serving", "jobs"],
)
def test_a_sqlite_database_is_refused_at_once_with_e001(
    tmp_path: Path, sqlite_settings: str, command: list[str]
) -> None:
    done = manage(tmp_path, sqlite_settings, *command)
    assert done.returncode != 0, done.stdout
    assert "django_jobs.E001" in done.stderr
    assert "'django.db.backends.sqlite3'" in done.stderr
    assert "clock_timestamp" not in done.stderr  # not mistaken for a store outage
    if django.VERSION < (6,):
        # E001 reads the ENGINE without connecting. On Django 6, Django's own model check of
        # a JSONField asks SQLite whether it supports JSON (features.supports_json_field),
        # which opens the file before E001 is reported.
        assert not (tmp_path / "jobs.sqlite3").exists()


# --- 2. A schedules module that fails to import --------------------------------------------


@pytest.fixture
def broken_app(tmp_path: Path) -> str:
    app = tmp_path / "brokenapp"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "schedules.py").write_text(BROKEN_SCHEDULES)
    (tmp_path / "broken_settings.py").write_text(BROKEN_SETTINGS)
    return "broken_settings"


def e033_names_the_file_line_key_and_field(stderr: str, tmp_path: Path) -> None:
    assert "django_jobs.E033" in stderr
    assert f"{tmp_path / 'brokenapp' / 'schedules.py'}, line 5" in stderr
    assert "schedule 'orders.sync', field 'timing.cron'" in stderr
    assert "cron field 'minute' is '61': must be 0-59" in stderr


@pytest.mark.processes
def test_a_failing_schedules_module_leaves_the_website_up(tmp_path: Path, broken_app: str) -> None:
    code = (
        "from django.core.wsgi import get_wsgi_application\n"
        "application = get_wsgi_application()\n"
        "print('website up')\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": broken_app,
            "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        },
        capture_output=True,
        text=True,
        timeout=PROMPTLY,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "website up"), done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.processes
@pytest.mark.parametrize(
    "command", [["check"], ["runworker", "--once"], ["jobs", "sync"]], ids=lambda c: c[0]
)
def test_check_runworker_and_jobs_refuse_it_with_e033(
    tmp_path: Path, broken_app: str, command: list[str]
) -> None:
    done = manage(tmp_path, broken_app, *command)
    assert done.returncode != 0, done.stdout
    e033_names_the_file_line_key_and_field(done.stderr, tmp_path)
    assert "Traceback" not in done.stderr


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("command", [["jobs", "sync"], ["runworker", "--once"]], ids=lambda c: c[0])
def test_a_partial_declared_set_is_never_synced_even_with_the_checks_skipped(
    tmp_path: Path, broken_app: str, command: list[str]
) -> None:
    """A sync retires what is not declared: the set without the failed module must not be
    written, or its schedules would be retired."""
    kept = ScheduleFactory.create(key="orders.sync", origin="code", status="active")
    name, *rest = command
    done = manage(
        tmp_path, broken_app, name, "--skip-checks", *rest, env={"DATABASE_URL": database_url()}
    )
    assert done.returncode != 0, done.stdout
    e033_names_the_file_line_key_and_field(done.stderr, tmp_path)
    kept.refresh_from_db()
    assert kept.status == "active"
    assert not Schedule.objects.filter(key="broken.fine").exists()  # nor half of the module


@pytest.mark.parametrize(
    ("expr", "said"),
    [
        ("61 * * * *", "cron field 'minute' is '61': must be 0-59"),
        ("0 24 * * *", "cron field 'hour' is '24': must be 0-23"),
        ("0 9 0 * *", "cron field 'day-of-month' is '0': must be 1-31"),
        ("0 9 1 13 *", "cron field 'month' is '13': must be 1-12 or jan-dec"),
        ("0 9 * * 8", "cron field 'day-of-week' is '8': must be 0-7 or sun-sat"),
    ],
)
def test_a_cron_error_names_the_field_and_its_value(expr: str, said: str) -> None:
    with pytest.raises(cronlib.InvalidCron) as raised:
        cronlib.normalise(expr)
    assert str(raised.value) == f"{expr!r} is not a valid cron expression: {said}"


# --- 3. COMMANDS and APPROVED_PORTS entries that do not import ----------------------------


def e034() -> list[str]:
    return [m.msg for m in run_checks() if m.id == "django_jobs.E034"]


def test_a_commands_entry_that_does_not_import_is_named() -> None:
    assert e034() == []  # the suite's own COMMANDS import
    with override_settings(
        DJANGO_JOBS={
            "COMMANDS": ["tests.workerapp.effects", "example_project.billing.statments"],
            "APPROVED_PORTS": ["tests.workerapp.effects.no_such_port", "nosuchpackage.mailer"],
        }
    ):
        found = e034()
    assert found == [
        "DJANGO_JOBS['COMMANDS'] entry 'example_project.billing.statments' does not import: no "
        "module named 'example_project.billing.statments', and module 'example_project.billing' "
        "has no attribute 'statments' (did you mean 'statements'?).",
        "DJANGO_JOBS['APPROVED_PORTS'] entry 'tests.workerapp.effects.no_such_port' does not "
        "import: no module named 'tests.workerapp.effects.no_such_port', and module "
        "'tests.workerapp.effects' has no attribute 'no_such_port'.",
        "DJANGO_JOBS['APPROVED_PORTS'] entry 'nosuchpackage.mailer' does not import: "
        "ModuleNotFoundError: No module named 'nosuchpackage'.",
    ]


def test_a_commands_module_that_raises_is_named_with_its_error(tmp_path, monkeypatch) -> None:
    (tmp_path / "raising_commands.py").write_text("raise RuntimeError('no partner key')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with override_settings(DJANGO_JOBS={"COMMANDS": ["raising_commands"]}):
        assert e034() == [
            "DJANGO_JOBS['COMMANDS'] entry 'raising_commands' does not import: RuntimeError: "
            "no partner key."
        ]


# --- 4 and 5. Did you mean; messages that lead with the key --------------------------------


@pytest.fixture
def declarations(monkeypatch):
    """A declared set of the test's own, forgotten after it."""
    monkeypatch.setattr(declared, "_items", {})
    return declared


def declare(key: str, **fields) -> None:
    schedule(key, **_declared(fields))


def test_e014_names_the_close_job(declarations) -> None:
    declare("tests.typo", job="billing.send_statement")
    (message,) = [m for m in run_checks() if m.id == "django_jobs.E014"]
    assert message.hint == (
        "No job is registered as 'billing.send_statement' (did you mean "
        "'billing.send_statements'?): correct job=, or register one with "
        '@job("billing.send_statement") in the jobs.py of the app that owns the behaviour.'
    )


def declare_in(module: str, key: str, **fields) -> None:
    """``declare`` as a schedules module named ``module`` would (``schedule()`` records the
    module that called it)."""
    namespace = {"__name__": module, "schedule": schedule, "fields": _declared(fields)}
    exec(f"schedule({key!r}, **fields)", namespace)


def _declared(fields: dict) -> dict:
    return {
        "job": "billing.send_statements",
        "timing": every(timedelta(minutes=5)),
        "operating_owner": "team",
        "record_owner": "ops@example.com",
        "status": "active",
        "retention": 3,
        **fields,
    }


def test_check_messages_lead_with_the_schedule_key_and_stay_short(declarations) -> None:
    """Django prints ``str(obj)`` before each message: the key and module, never the
    declaration's repr (about 900 characters). The hint follows on a line of its own."""
    declare_in("shop.schedules", "tests.short.unhandled", job="tests.nobody")
    draft = {"status": "draft", "decider": "cfo", "decide_by": date(2026, 3, 10)}
    declare_in("shop.schedules", "tests.short.draft", **draft)
    declare_in(
        "shop.schedules", "tests.short.local", timing=cron("0 9 * * *", zone="Europe/London")
    )
    declare_in("shop.helpers", "tests.short.misplaced")
    with use_clock(FakeClock(datetime(2026, 3, 11, tzinfo=UTC))):
        messages = [
            m
            for m in run_checks()
            if (m.id or "").startswith("django_jobs.") and "tests.short." in m.msg
        ]
    assert {m.id for m in messages} == {
        "django_jobs.E014",
        "django_jobs.E012",
        "django_jobs.E018",
        "django_jobs.E019",
        "django_jobs.W027",
    }
    for m in messages:
        first_line = str(m).split("\n")[0]
        assert first_line.startswith("schedule 'tests.short."), first_line
        assert "(shop." in first_line
        assert len(first_line) < 300, first_line
        assert "Declaration(" not in str(m)


@pytest.mark.django_db
def test_jobs_inspect_names_the_close_key_the_actor_may_see() -> None:
    ScheduleFactory.create(key="orders.sync")
    ScheduleFactory.create(tenant="other", key="orders.sink")
    boss = User.objects.create_superuser("boss")
    with pytest.raises(CommandError) as raised:
        call_command("jobs", "inspect", "orders.snyc", "--actor", boss.username)
    assert str(raised.value) == (
        "no schedule 'orders.snyc' that you may see (did you mean 'orders.sync'?)"
    )
    # Only among the schedules the actor may see: nothing of acme's to a stranger.
    User.objects.create_user("stranger")
    with pytest.raises(CommandError) as raised:
        call_command("jobs", "inspect", "orders.snyc", "--actor", "stranger")
    assert str(raised.value) == "no schedule 'orders.snyc' that you may see"


# --- 6. --actor defaults ------------------------------------------------------------------


@pytest.fixture
def nightly(db) -> Schedule:
    schedule_row = ScheduleFactory.create(tenant="acme", key="billing.nightly")
    runbooks.write(schedule_row)
    return schedule_row


def operator(name: str) -> User:
    user = User.objects.create_user(name)
    group = Group.objects.create(name=f"{name}-ops")
    user.groups.add(group)
    grant_tenant(group, "acme", "view", "disable")
    return user


def disable_without_actor() -> str:
    out = StringIO()
    call_command(
        "jobs", "disable", "billing.nightly", "--tenant", "acme", "--reason", "partner outage",
        stdout=out,
    )  # fmt: skip
    return out.getvalue()


def audited_actor() -> tuple[str, str | None]:
    record = AuditRecord.objects.get(action="disable")
    return record.actor, record.actor_id


@override_settings(DJANGO_JOBS={"CLI_ACTOR": "alice"})
def test_without_actor_the_command_acts_as_cli_actor(nightly) -> None:
    alice = operator("alice")
    operator(os_user())  # CLI_ACTOR comes first
    assert "disabled acme/billing.nightly" in disable_without_actor()
    assert audited_actor() == ("alice", str(alice.pk))


def test_without_actor_or_cli_actor_the_command_acts_as_the_os_user(nightly) -> None:
    me = operator(os_user())
    disable_without_actor()
    assert audited_actor() == (me.username, str(me.pk))


def test_without_any_the_error_says_what_to_do(nightly) -> None:
    name = os_user()
    with pytest.raises(CommandError) as raised:
        disable_without_actor()
    assert str(raised.value) == (
        "no --actor given, DJANGO_JOBS['CLI_ACTOR'] is not set, and no Django user is named "
        f"{name!r} (the OS user running this command): pass --actor <username>, set "
        f"DJANGO_JOBS['CLI_ACTOR'] to a Django username, or create a Django user named {name!r}"
    )
    assert Schedule.objects.get().enabled


@override_settings(DJANGO_JOBS={"CLI_ACTOR": "alice", "CLI_ACTOR_RULES": ["os_user"]})
def test_the_actor_rules_still_apply_to_the_default(nightly) -> None:
    operator("alice")
    with pytest.raises(CommandError, match=r"DJANGO_JOBS\['CLI_ACTOR'\] 'alice' is not the OS"):
        disable_without_actor()
    assert not AuditRecord.objects.exists()


@override_settings(DJANGO_JOBS={"CLI_ACTOR": "nobody-here"})
def test_a_cli_actor_that_is_no_user_is_named(nightly) -> None:
    with pytest.raises(CommandError) as raised:
        disable_without_actor()
    assert (
        str(raised.value) == "DJANGO_JOBS['CLI_ACTOR'] 'nobody-here' is not a user of this project"
    )
