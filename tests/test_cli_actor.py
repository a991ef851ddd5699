"""``manage.py jobs --actor`` is self-asserted; ``DJANGO_JOBS["CLI_ACTOR_RULES"]`` pins it.

Whoever runs ``manage.py`` holds the database credentials (full trust), so by default the
actor is whoever they say. ``"os_user"`` makes the actor the OS user running the command;
``"no_superuser"`` refuses superusers, so the command runs with an operator's own grants.
"""

from __future__ import annotations

import getpass
from io import StringIO

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_jobs import runbooks
from django_jobs.conf import get_settings
from django_jobs.exceptions import ConfigurationError
from django_jobs.models import AuditRecord, Schedule
from django_jobs.permissions import grant_tenant

from .factories import ScheduleFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def nightly() -> Schedule:
    schedule = ScheduleFactory.create(tenant="acme", key="billing.nightly")
    runbooks.write(schedule)
    return schedule


def disable(actor: str) -> str:
    out = StringIO()
    call_command(
        "jobs", "disable", "billing.nightly", "--tenant", "acme", "--actor", actor,
        "--reason", "partner outage", stdout=out,
    )  # fmt: skip
    return out.getvalue()


def operator(name: str) -> User:
    """A user who may disable acme's schedules, and nothing more."""
    user = User.objects.create_user(name)
    group = Group.objects.create(name=f"{name}-ops")
    user.groups.add(group)
    grant_tenant(group, "acme", "view", "disable")
    return user


def test_by_default_the_actor_is_whoever_the_command_names(nightly) -> None:
    """Documented, not a defence: without rules any user's name may be given."""
    User.objects.create_superuser("someone-else")
    assert "disabled acme/billing.nightly" in disable("someone-else")


@override_settings(DJANGO_JOBS={"CLI_ACTOR_RULES": ["os_user"]})
def test_os_user_refuses_an_actor_other_than_the_os_user(nightly) -> None:
    User.objects.create_superuser("colleague")
    with pytest.raises(CommandError, match=r"--actor 'colleague' is not the OS user running"):
        disable("colleague")
    assert not AuditRecord.objects.exists()
    assert Schedule.objects.get().enabled


@override_settings(DJANGO_JOBS={"CLI_ACTOR_RULES": ["os_user"]})
def test_os_user_accepts_the_os_users_own_name(nightly) -> None:
    me = operator(getpass.getuser())
    disable(me.username)
    record = AuditRecord.objects.get()
    assert (record.actor, record.actor_id) == (me.username, str(me.pk))


@override_settings(DJANGO_JOBS={"CLI_ACTOR_RULES": ["no_superuser"]})
def test_no_superuser_refuses_a_superuser_actor(nightly) -> None:
    User.objects.create_superuser("root-ish")
    with pytest.raises(CommandError, match=r"--actor 'root-ish' is a superuser"):
        disable("root-ish")
    assert not AuditRecord.objects.exists()
    operator("alice")
    disable("alice")
    assert AuditRecord.objects.get().actor == "alice"


@override_settings(DJANGO_JOBS={"CLI_ACTOR_RULES": ["os_user", "no_superuser"]})
def test_both_rules_apply_together(nightly) -> None:
    User.objects.create_superuser(getpass.getuser())
    with pytest.raises(CommandError, match="is a superuser"):
        disable(getpass.getuser())


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("os_user", "must be a list of rules"),
        (["os-user"], "unknown rule 'os-user'"),
        ([None], "unknown rule None"),
    ],
)
def test_bad_cli_actor_rules_are_refused_naming_the_setting(value, message) -> None:
    with (
        override_settings(DJANGO_JOBS={"CLI_ACTOR_RULES": value}),
        pytest.raises(ConfigurationError, match=message) as raised,
    ):
        get_settings()
    assert "DJANGO_JOBS['CLI_ACTOR_RULES']" in str(raised.value)
