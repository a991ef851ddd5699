"""Hostile calls of the service layer: refused with an error naming the field; nothing changes."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from django_jobs import services
from django_jobs.exceptions import JobsError
from django_jobs.models import AuditRecord, Occurrence
from django_jobs.permissions import Forbidden, grant_tenant

from .factories import T0, ScheduleFactory, dead_occurrence, declaration
from .snapshots import snapshot

pytestmark = pytest.mark.django_db

NAIVE = datetime(2026, 3, 1, 12, 0)  # noqa: DTZ001  (the hostile input under test)


@pytest.fixture
def dead() -> Occurrence:
    return dead_occurrence(ScheduleFactory.create(tenant="acme", key="acme.nightly"))


def calls(occurrence: Occurrence) -> dict[str, Callable[..., Any]]:
    """Each service, with everything but ``actor``, ``reason`` and ``now`` bound."""
    schedule = occurrence.schedule
    return {
        "replay": lambda **kw: services.replay(occurrence, **kw),
        "disable": lambda **kw: services.disable(schedule, **kw),
        "enable": lambda **kw: services.enable(schedule, **kw),
        "run_now": lambda **kw: services.run_now(schedule, **kw),
    }


@pytest.mark.parametrize("name", ["replay", "disable", "enable", "run_now"])
def test_a_naive_now_is_refused_naming_now(root, dead, name) -> None:
    """Regression: a naive ``now`` was stored, read in the server's TIME_ZONE."""
    before = snapshot()
    with pytest.raises(ValueError, match="now must be an aware datetime"):
        calls(dead)[name](actor=root, reason="x", now=NAIVE)
    assert snapshot() == before


def test_a_naive_now_is_refused_by_purge_inspect_and_upsert(root, dead) -> None:
    before = snapshot()
    with pytest.raises(ValueError, match="now must be an aware"):
        services.purge(dead.schedule, actor=root, now=NAIVE)
    with pytest.raises(ValueError, match="now must be an aware"):
        services.inspect_schedule(dead.schedule, actor=root, now=NAIVE)
    with pytest.raises(ValueError, match="now must be an aware"):
        services.upsert_schedule(declaration(), actor=root, reason="x", now=NAIVE)
    assert snapshot() == before


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("", "reason: say why"),
        ("   \n", "reason: say why"),
        (None, "reason: say why"),
        (42, "reason: say why"),
        ("x" * 2001, "reason: at most 2000 characters, got 2001"),
        ("y" * 100_000, "reason: at most 2000 characters, got 100000"),
        # Regression: NUL reached PostgreSQL and failed with a DataError.
        ("partner\x00down", "reason: must not contain NUL"),
        ("bell\x07", "reason: must not contain NUL or other control characters"),
    ],
)
@pytest.mark.parametrize("name", ["replay", "disable", "enable", "run_now"])
def test_a_bad_reason_is_refused_naming_the_reason(root, dead, name, reason, message) -> None:
    before = snapshot()
    with pytest.raises(JobsError, match=message):
        calls(dead)[name](actor=root, reason=reason, now=T0)
    assert snapshot() == before


@pytest.mark.parametrize(
    ("actor", "reason", "message"),
    [
        ("root", "", "schedule 'billing.nightly': reason: say why"),
        ("root", "acme\x00", "reason: must not contain NUL"),
        # A name is not a user: it could claim to be anyone, django_jobs.sync included.
        ("alice", "why", "actor: a Django user is needed"),
        ("django_jobs.sync", "why", "actor: a Django user is needed"),
        (None, "why", "actor: a Django user is needed"),
        # Regression: NUL and long actor names reached PostgreSQL (a DataError).
        (User(username="al\x00ice", is_superuser=True), "why", "actor: a name of 1-200 printable"),
        (User(username="a" * 201, is_superuser=True), "why", "actor: a name of 1-200 printable"),
    ],
)
def test_upsert_refuses_a_bad_actor_or_reason_and_writes_nothing(
    root, actor, reason, message
) -> None:
    """Regression: a missing reason raised a bare ValueError; NUL and long actors a DataError."""
    before = snapshot()
    with pytest.raises(JobsError, match=message):
        services.upsert_schedule(
            declaration(), actor=root if actor == "root" else actor, reason=reason, now=T0
        )
    assert snapshot() == before


@pytest.mark.parametrize(
    "instant", [datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, tzinfo=UTC)]
)
def test_run_now_at_the_ends_of_the_calendar_plans_one_occurrence(root, instant) -> None:
    schedule = ScheduleFactory.create()
    occurrence = services.run_now(schedule, actor=root, reason="edge", now=instant)
    assert occurrence.scheduled_at == instant
    assert AuditRecord.objects.get().target_id == str(occurrence.pk)


# --- permission: every service, every way of lacking it ---------------------------------------


@pytest.fixture
def outsiders(dead) -> dict[str, User]:
    """Users who may not act on acme's schedule, each for a different reason."""
    other = User.objects.create_user("globex-ops", is_staff=True)
    globex = Group.objects.create(name="globex-ops")
    other.groups.add(globex)
    grant_tenant(globex, "globex")  # every action, on the wrong tenant
    viewer = User.objects.create_user("acme-viewer", is_staff=True)
    viewers = Group.objects.create(name="acme-viewers")
    viewer.groups.add(viewers)
    grant_tenant(viewers, "acme", "view")  # may look, not act
    inactive = User.objects.create_superuser("retired-root", "r@example.com", "x")
    inactive.is_active = False
    inactive.save()
    return {
        "other tenant": other,
        "viewer": viewer,
        "inactive": inactive,
        "nobody": User.objects.create_user("nobody"),
    }


ACTIONS = {
    "replay": ("replay", lambda o, u: services.replay(o, actor=u, reason="x", now=T0)),
    "disable": ("disable", lambda o, u: services.disable(o.schedule, actor=u, reason="x", now=T0)),
    "disable+cancel": (
        "disable",
        lambda o, u: services.disable(o.schedule, actor=u, reason="x", now=T0, cancel_running=True),
    ),
    "enable": ("disable", lambda o, u: services.enable(o.schedule, actor=u, reason="x", now=T0)),
    "run_now": ("run", lambda o, u: services.run_now(o.schedule, actor=u, reason="x", now=T0)),
    "purge": ("purge", lambda o, u: services.purge(o.schedule, actor=u, now=T0 + timedelta(1))),
    "inspect_schedule": (
        "view",
        lambda o, u: services.inspect_schedule(o.schedule, actor=u, now=T0),
    ),
    "inspect_occurrence": ("view", lambda o, u: services.inspect_occurrence(o, actor=u)),
}


@pytest.mark.parametrize(
    ("service", "who"),
    [
        (service, who)
        for service, (action, _) in ACTIONS.items()
        for who in ("other tenant", "viewer", "inactive", "nobody")
        if not (who == "viewer" and action == "view")  # a viewer may view
    ],
)
def test_every_service_refuses_an_actor_without_permission(dead, outsiders, service, who) -> None:
    action, call = ACTIONS[service]
    user = outsiders[who]
    before = snapshot()
    with pytest.raises(Forbidden, match=rf"{user.username} may not {action} schedule acme/"):
        call(dead, user)
    assert snapshot() == before


def test_no_service_edits_or_deletes_audit_records(root, dead) -> None:
    functions = [
        name
        for name, value in vars(services).items()
        if inspect.isfunction(value) and value.__module__.startswith(f"{services.__name__}.")
    ]
    assert "replay" in functions
    assert not [name for name in functions if "audit" in name and not name.startswith("_")]
    services.disable(dead.schedule, actor=root, reason="first", now=T0)
    record = AuditRecord.objects.values().get()
    # Every service run again leaves the earlier record as it was.
    services.enable(dead.schedule, actor=root, reason="second", now=T0)
    services.replay(dead, actor=root, reason="third", now=T0)
    services.purge(dead.schedule, actor=root, now=T0)
    assert AuditRecord.objects.values().get(pk=record["id"]) == record
    assert AuditRecord.objects.count() == 4
