"""Issue #33, finding 8: the ``os_user`` actor rule names the account the command runs as.

``CLI_ACTOR_RULES = ["os_user"]`` accepted an ``--actor`` equal to ``$LOGNAME``/``$USER``
(``getpass.getuser()``): root ran ``LOGNAME=alice manage.py jobs disable ... --actor alice``
and the audit said alice. The OS user is now the effective uid's passwd entry; the
environment is not read.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from io import StringIO

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_jobs import runbooks
from django_jobs.models import AuditRecord, Schedule
from django_jobs.permissions import grant_tenant

from .factories import ScheduleFactory
from .processes import ROOT, database_url

pytestmark = pytest.mark.django_db

ME = pwd.getpwuid(os.geteuid()).pw_name  # who runs the tests (root, in CI)
COLLEAGUE = "alice" if ME != "alice" else "bob"
OS_USER = {"DJANGO_JOBS": {"CLI_ACTOR_RULES": ["os_user"]}}


@pytest.fixture
def nightly() -> Schedule:
    schedule = ScheduleFactory.create(tenant="acme", key="billing.nightly")
    runbooks.write(schedule)
    return schedule


def operator(name: str) -> User:
    """A user who may disable acme's schedules, and nothing more."""
    user = User.objects.create_user(name)
    group = Group.objects.create(name=f"{name}-ops")
    user.groups.add(group)
    grant_tenant(group, "acme", "view", "disable")
    return user


def disable(actor: str) -> str:
    out = StringIO()
    call_command(
        "jobs", "disable", "billing.nightly", "--tenant", "acme", "--actor", actor,
        "--reason", "partner outage", stdout=out,
    )  # fmt: skip
    return out.getvalue()


@pytest.fixture
def claims_to_be_colleague(monkeypatch) -> None:
    """The environment of ``LOGNAME=alice USER=alice manage.py ...``."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, COLLEAGUE)


@override_settings(**OS_USER)
def test_logname_does_not_make_the_os_user_someone_else(nightly, claims_to_be_colleague) -> None:
    operator(COLLEAGUE)
    with pytest.raises(
        CommandError, match=rf"--actor '{COLLEAGUE}' is not the OS user running this command "
        rf"\('{ME}'\)"
    ):  # fmt: skip
        disable(COLLEAGUE)
    assert not AuditRecord.objects.exists()
    assert Schedule.objects.get().enabled


@override_settings(**OS_USER)
def test_the_accounts_own_name_is_accepted_whatever_logname_says(
    nightly, claims_to_be_colleague
) -> None:
    me = operator(ME)
    disable(ME)
    record = AuditRecord.objects.get()
    assert (record.actor, record.actor_id) == (ME, str(me.pk))


@pytest.mark.django_db(transaction=True)
def test_a_real_jobs_command_run_with_logname_of_a_colleague_is_refused(nightly) -> None:
    """The attack as reported: a real ``manage.py jobs disable`` process whose environment
    says it is the colleague."""
    operator(COLLEAGUE)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.trust_actor_settings",
        "DATABASE_URL": database_url(),
        "LOGNAME": COLLEAGUE,
        "USER": COLLEAGUE,
    }
    done = subprocess.run(
        [
            sys.executable, "-W", "ignore", str(ROOT / "manage.py"), "jobs", "disable",
            "billing.nightly", "--tenant", "acme", "--actor", COLLEAGUE, "--reason", "outage",
        ],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode != 0, done.stdout
    assert f"--actor '{COLLEAGUE}' is not the OS user running this command ('{ME}')" in (
        done.stderr
    )
    assert not AuditRecord.objects.exists()
    assert Schedule.objects.get().enabled
