"""``manage.py jobs`` with wrong, missing or hostile arguments: a clear error, nothing changed."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.db import connection

from django_jobs import runbooks
from django_jobs.models import AuditRecord, Limit, Occurrence, Schedule
from django_jobs.permissions import grant_tenant

from .conftest import ROOT
from .factories import ScheduleFactory, dead_occurrence
from .snapshots import snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture
def acme_ops() -> User:
    """Operators of tenant acme: every action on acme, nothing on globex."""
    user = User.objects.create_user("acme-ops", is_staff=True)
    group = Group.objects.create(name="acme-ops")
    user.groups.add(group)
    grant_tenant(group, "acme")
    return user


@pytest.fixture
def occurrences() -> dict[str, Occurrence]:
    """A dead occurrence in each of two tenants."""
    found = {}
    for tenant in ("acme", "globex"):
        schedule = ScheduleFactory.create(tenant=tenant, key="billing.nightly")
        Limit.objects.create(schedule=schedule, keep_last=5)
        runbooks.write(schedule)
        found[tenant] = dead_occurrence(schedule)
    return found


def jobs(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


ACME = ["billing.nightly", "--tenant", "acme"]
GLOBEX = ["billing.nightly", "--tenant", "globex"]
ACTOR = ["--actor", "acme-ops"]
SQL = "'; DROP TABLE django_jobs_schedule; --"

HOSTILE = [
    # Unknown or invisible schedules answer alike (no existence leak).
    (
        ["disable", "billing.nope", "--tenant", "acme", *ACTOR, "--reason", "x"],
        "no schedule 'billing.nope'",
    ),
    (
        ["disable", *GLOBEX, *ACTOR, "--reason", "x"],
        "no schedule 'billing.nightly' in tenant 'globex'",
    ),
    (["enable", *GLOBEX, *ACTOR, "--reason", "x"], "no schedule 'billing.nightly' in tenant"),
    (["run-now", *GLOBEX, *ACTOR, "--reason", "x"], "no schedule 'billing.nightly' in tenant"),
    (["purge", *GLOBEX, *ACTOR], "no schedule 'billing.nightly' in tenant"),
    (["inspect", *GLOBEX, *ACTOR], "no schedule 'billing.nightly' in tenant"),
    (["disable", SQL, *ACTOR, "--reason", "x"], "no schedule \"'; DROP TABLE"),
    (["disable", "billing.nightly", "--tenant", SQL, *ACTOR, "--reason", "x"], "no schedule"),
    # Oversized and NUL-carrying arguments never reach the database (which refuses NUL).
    (
        ["disable", "k" * 100_000, *ACTOR, "--reason", "x"],
        "KEY: at most 200 characters, got 100000",
    ),
    (["disable", "billing.\x00nightly", *ACTOR, "--reason", "x"], "KEY: must not contain NUL"),
    (
        ["disable", *ACME, "--actor", "acme\x00ops", "--reason", "x"],
        "--actor: must not contain NUL",
    ),
    (["list", "--actor", "acme-ops", "--tenant", "ac\x00me"], "--tenant: must not contain NUL"),
    (["runbooks", "--key", "billing\x00", *ACTOR], "KEY: must not contain NUL"),
    (["disable", *ACME, *ACTOR, "--reason", "r" * 100_000], "--reason: at most 2000 characters"),
    (["disable", *ACME, *ACTOR, "--reason", "why\x00"], "--reason: must not contain NUL"),
    (["disable", *ACME, *ACTOR, "--reason", "   "], "reason: say why"),
    # Unknown actors.
    (["disable", *ACME, "--actor", "ghost", "--reason", "x"], "--actor 'ghost' is not a user"),
    (["list", "--actor", SQL], '--actor "\'; DROP TABLE django_jobs_schedule; --" is not a user'),
    # Malformed and forged occurrence ids.
    (["replay", "not-a-uuid", *ACTOR, "--reason", "x"], "no occurrence 'not-a-uuid'"),
    (["replay", "1 OR 1=1", *ACTOR, "--reason", "x"], "no occurrence '1 OR 1=1'"),
    (["replay", "o" * 101, *ACTOR, "--reason", "x"], "OCCURRENCE: at most 100 characters"),
    (["inspect", *ACME, "--occurrence", "{}", *ACTOR], "no occurrence '{}'"),
    # Bad numbers.
    (["health", "--max-age", "nan"], "--max-age: must be a positive number of seconds"),
    (["health", "--max-age", "-5"], "--max-age: must be a positive number of seconds"),
    (["health", "--max-age", "inf"], "--max-age: must be a positive number of seconds"),
    (["health", "--max-age", "soon"], "--max-age: 'soon' is not a number of seconds"),
]


@pytest.mark.parametrize(("args", "message"), HOSTILE)
def test_hostile_arguments_exit_non_zero_naming_the_argument_and_change_nothing(
    acme_ops, occurrences, args, message
) -> None:
    before = snapshot()
    with pytest.raises(CommandError) as raised:
        jobs(*args)
    assert message in str(raised.value)
    assert snapshot() == before


def test_an_occurrence_of_another_tenant_is_not_found(acme_ops, occurrences) -> None:
    forged = str(occurrences["globex"].pk)
    before = snapshot()
    with pytest.raises(CommandError, match=f"no occurrence '{forged}' that you may see"):
        jobs("replay", forged, *ACTOR, "--reason", "forged")
    # Nor through a schedule it may see.
    with pytest.raises(CommandError, match=f"no occurrence '{forged}' that you may see"):
        jobs("inspect", *ACME, "--occurrence", forged, *ACTOR)
    assert snapshot() == before


@pytest.mark.parametrize(
    "args",
    [
        ["disable", *ACME, *ACTOR],  # no --reason
        ["enable", *ACME, *ACTOR],
        ["run-now", *ACME, *ACTOR],
        ["replay", "x", *ACTOR],
        # no --actor, no CLI_ACTOR and no user named as the OS user: says what to do
        ["disable", *ACME, "--reason", "x"],
        ["disable", "--tenant", "acme", *ACTOR, "--reason", "x"],  # no KEY
        ["frobnicate"],
    ],
)
def test_missing_arguments_exit_non_zero(acme_ops, occurrences, args) -> None:
    before = snapshot()
    with pytest.raises(CommandError, match=r"required|invalid choice|the following|no --actor"):
        jobs(*args)
    assert snapshot() == before


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_a_real_invocation_exits_non_zero_and_says_why() -> None:
    """``python manage.py jobs`` as an operator runs it: exit code and stderr, not a traceback."""
    settings = connection.settings_dict
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": (
            f"postgres://{settings['USER']}:{settings['PASSWORD']}@{settings['HOST']}:"
            f"{settings['PORT']}/{settings['NAME']}"
        ),
    }
    User.objects.create_superuser("ops", "ops@example.com", "x")
    ScheduleFactory.create(tenant="acme", key="billing.nightly")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "django", "jobs", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    unknown = run("disable", "billing.nope", "--actor", "ops", "--reason", "x")
    assert unknown.returncode == 1
    assert "CommandError: no schedule 'billing.nope' that you may see" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    missing = run("disable", "billing.nightly", "--tenant", "acme", "--actor", "ops")
    assert missing.returncode == 2  # argparse's usage error
    assert "the following arguments are required: --reason" in missing.stderr
    assert Schedule.objects.get().enabled is True
    assert not AuditRecord.objects.exists()
