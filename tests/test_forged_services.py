"""Services decide with rows they read themselves: a forged object borrows nothing.

Of the schedule or occurrence a caller passes, a service uses only the primary key. These
tests hand them objects built to lie (an occurrence of tenant globex dressed as one of acme's
schedule, a schedule whose id is globex's and whose tenant says acme) to a user whose grant
covers acme only: each is refused, nothing changes, and no audit record is written.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User

from django_jobs import services, store
from django_jobs.exceptions import JobsError
from django_jobs.models import AuditRecord, Limit, Occurrence, Schedule
from django_jobs.permissions import Forbidden, grant_tenant

from .factories import T0, ScheduleFactory, dead_occurrence
from .snapshots import snapshot
from .storeutil import claim, plan

pytestmark = pytest.mark.django_db

LATER = T0 + timedelta(days=1)


@pytest.fixture
def acme() -> Schedule:
    schedule = ScheduleFactory.create(tenant="acme", key="billing.nightly")
    dead_occurrence(schedule, T0, message="acme boom")
    return schedule


@pytest.fixture
def globex() -> Schedule:
    """Globex's schedule: two dead occurrences, a Limit keeping one (a purge deletes one)."""
    schedule = ScheduleFactory.create(tenant="globex", key="billing.nightly")
    Limit.objects.create(schedule=schedule, keep_last=1)
    dead_occurrence(schedule, T0, message="globex boom")
    dead_occurrence(schedule, T0 + timedelta(minutes=1), message="globex boom")
    return schedule


@pytest.fixture
def alice(acme) -> User:
    """Staff of acme: every action on acme's schedules, nothing of globex."""
    user = User.objects.create_user("alice", is_staff=True)
    group = Group.objects.create(name="acme-ops")
    user.groups.add(group)
    grant_tenant(group, "acme")
    return user


def forged_occurrence(globex: Schedule, acme: Schedule) -> Occurrence:
    """Globex's occurrence id, dressed as an occurrence of acme's schedule."""
    theirs = Occurrence.objects.filter(schedule=globex).order_by("scheduled_at").first()
    assert theirs is not None
    return Occurrence(pk=theirs.pk, schedule=acme, tenant="acme", state="dead")


def forged_schedule(globex: Schedule) -> Schedule:
    """Globex's schedule id, with acme's tenant on the object."""
    return Schedule(pk=globex.pk, tenant="acme", key="billing.nightly")


def test_a_forged_occurrence_schedule_pair_is_refused_by_replay(alice, acme, globex) -> None:
    """Regression: the permission was checked on ``occurrence.schedule`` (acme) and the store
    replayed by primary key alone (globex's), audited as acme."""
    before = snapshot()
    with pytest.raises(Forbidden, match=r"alice may not replay schedule globex/billing\.nightly"):
        services.replay(forged_occurrence(globex, acme), actor=alice, reason="x", now=LATER)
    assert snapshot() == before
    assert not AuditRecord.objects.exists()


def test_a_forged_schedule_is_refused_by_purge(alice, acme, globex) -> None:
    """Regression: purge checked the caller's object (tenant acme) and purged by its pk."""
    before = snapshot()
    with pytest.raises(Forbidden, match=r"alice may not purge schedule globex/billing\.nightly"):
        services.purge(forged_schedule(globex), actor=alice, now=LATER)
    assert snapshot() == before
    assert Occurrence.objects.filter(schedule=globex).count() == 2


def test_a_forged_schedule_is_refused_by_inspect_schedule(alice, acme, globex) -> None:
    """Regression: inspect_schedule showed globex's occurrences to acme's staff."""
    with pytest.raises(Forbidden, match=r"alice may not view schedule globex/billing\.nightly"):
        services.inspect_schedule(forged_schedule(globex), actor=alice, now=LATER)


def test_a_forged_occurrence_is_refused_by_inspect_occurrence(alice, acme, globex) -> None:
    """Regression: inspect_occurrence showed globex's attempts (and their errors)."""
    with pytest.raises(Forbidden, match=r"alice may not view schedule globex/billing\.nightly"):
        services.inspect_occurrence(forged_occurrence(globex, acme), actor=alice)


@pytest.mark.parametrize("service", ["disable", "enable", "run_now", "replay_at"])
def test_a_forged_schedule_is_refused_by_every_schedule_action(
    alice, acme, globex, service
) -> None:
    act = {
        "disable": lambda s: services.disable(
            s, actor=alice, reason="x", now=LATER, cancel_running=True
        ),
        "enable": lambda s: services.enable(s, actor=alice, reason="x", now=LATER),
        "run_now": lambda s: services.run_now(s, actor=alice, reason="x", now=LATER),
        "replay_at": lambda s: services.replay_at(s, at=T0, actor=alice, reason="x", now=LATER),
    }[service]
    before = snapshot()
    with pytest.raises(Forbidden, match=r"schedule globex/billing\.nightly"):
        act(forged_schedule(globex))
    assert snapshot() == before


def test_a_services_result_and_audit_name_the_row_not_the_callers_object(acme, globex) -> None:
    """A superuser may replay globex's occurrence: the forged ``schedule=acme`` is ignored,
    and the audit record names globex, where the replay happened."""
    root = User.objects.create_superuser("root")
    replayed = services.replay(forged_occurrence(globex, acme), actor=root, reason="x", now=LATER)
    assert (replayed.schedule_id, replayed.tenant) == (globex.pk, "globex")
    assert replayed.state == "scheduled"
    record = AuditRecord.objects.get()
    assert (record.schedule_id, record.tenant) == (globex.pk, "globex")
    report = services.inspect_schedule(forged_schedule(globex), actor=root, now=LATER)
    assert (report.schedule.tenant, report.schedule.pk) == ("globex", globex.pk)


def test_an_occurrence_whose_tenant_differs_from_its_schedules_is_refused(alice, acme) -> None:
    """A row written outside django_jobs that claims another tenant is acted on in neither."""
    occurrence = Occurrence.objects.get(schedule=acme)
    Occurrence.objects.filter(pk=occurrence.pk).update(tenant="globex")
    before = snapshot()
    with pytest.raises(JobsError, match=r"names tenant 'globex' but its schedule acme/"):
        services.replay(occurrence, actor=alice, reason="x", now=LATER)
    with pytest.raises(JobsError, match=r"names tenant 'globex'"):
        services.inspect_occurrence(occurrence, actor=alice)
    assert snapshot() == before


@pytest.mark.parametrize("pk", [None, "abc", 2**70, -1])
def test_a_schedule_object_naming_no_row_is_refused(alice, pk) -> None:
    before = snapshot()
    with pytest.raises(JobsError, match="no schedule with id"):
        services.disable(Schedule(pk=pk), actor=alice, reason="x", now=LATER)
    with pytest.raises(JobsError, match="no schedule with id"):
        services.inspect_schedule(Schedule(pk=pk), actor=alice, now=LATER)
    assert snapshot() == before


@pytest.mark.parametrize("pk", [None, "abc", "00000000-0000-0000-0000-000000000000"])
def test_an_occurrence_object_naming_no_row_is_refused(alice, pk) -> None:
    before = snapshot()
    with pytest.raises(JobsError, match="no occurrence with id"):
        services.replay(Occurrence(pk=pk), actor=alice, reason="x", now=LATER)
    with pytest.raises(JobsError, match="no occurrence with id"):
        services.inspect_occurrence(Occurrence(pk=pk), actor=alice)
    assert snapshot() == before


def test_the_stores_operator_writes_touch_only_the_named_schedule_and_tenant(acme, globex):
    """``store.replay`` and ``store.cancel_running`` name the schedule and tenant in their
    WHERE: a wrong pairing changes nothing."""
    theirs = Occurrence.objects.filter(schedule=globex).first()
    assert theirs is not None
    before = snapshot()
    assert not store.replay(theirs.pk, schedule_id=acme.pk, tenant="acme", now=LATER)
    assert not store.replay(theirs.pk, schedule_id=globex.pk, tenant="acme", now=LATER)
    plan(globex, T0 + timedelta(minutes=2), now=T0)
    claim("w", T0 + timedelta(minutes=2))
    running = snapshot()
    assert store.cancel_running(globex.pk, tenant="acme", now=LATER) == []
    assert snapshot() == running
    assert store.cancel_running(globex.pk, tenant="globex", now=LATER) != []
    assert before != running
