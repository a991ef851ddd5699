"""Replay at the service level, the one home of its behaviour: ``services.replay`` of a
finished occurrence and ``services.replay_at`` of any planned instant make a new attempt of the
same occurrence, under its identity and instant, audited; refused cases change nothing. Also
``jobs replay KEY --at``, the command's side of ``replay_at``, on this module's fixtures.

Elsewhere: the admin action and the command's other replays where their interface lives
(``test_admin``, ``test_browser``, ``test_jobs_command``); attacks in ``test_hostile_services``,
``test_forged_services`` and ``test_security_admin``; the misfire policies' replays
(``replay_once``, ``replay_all``) in ``test_planning``.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from django_jobs import at, services
from django_jobs.exceptions import JobsError
from django_jobs.identity import occurrence_id
from django_jobs.models import (
    Attempt,
    AuditRecord,
    Occurrence,
    OccurrenceState,
    Schedule,
    ScheduleStatus,
    Trigger,
)
from django_jobs.permissions import Forbidden
from django_jobs.registry import Registry
from django_jobs.testing import run_due

from .factories import (
    T0,
    ScheduleFactory,
    declaration,
    jobs_with_steps,
    retention_pass,
)

pytestmark = pytest.mark.django_db

FIRST = T0 + timedelta(minutes=1)  # an instant the summary counts, without a row


@pytest.fixture
def admin(root: User) -> User:
    """``root``, under the name the dead-occurrence tests give the superuser."""
    return root


@pytest.fixture
def summarised(clock) -> Schedule:
    """A per-minute schedule that was down five hours: its oldest missed instants are only
    counted in the planner's skip summary."""
    schedule = ScheduleFactory.create(
        tenant="acme",
        key="acme.sync",
        job="tests.counted",
        misfire="skip",
        max_delay=timedelta(seconds=30),
        next_due_at=T0,
    )
    clock.set(T0 + timedelta(hours=5))
    run_due(clock, jobs=counting([]))
    summary = AuditRecord.objects.get(action="misfire.skipped")
    assert summary.after["first"] == T0.isoformat()
    assert not Occurrence.objects.filter(scheduled_at=FIRST).exists()
    return schedule


def counting(ran: list[tuple[str, int, str]]) -> Registry:
    jobs = Registry()
    jobs.register(
        "tests.counted", lambda run: ran.append((run.occurrence_key, run.attempt, run.trigger))
    )
    return jobs


# --- replay of a finished occurrence: services.replay -------------------------------------


def test_replay_of_a_dead_occurrence_is_attempt_two_with_the_same_identity(admin, dead, clock):
    """It runs once, as manual attempt 2; the audit record names actor, reason and tenant."""
    from django_jobs.registry import Registry

    services.replay(dead, actor=admin, reason="partner API is back", now=clock.now())
    jobs = Registry()
    ran: list[tuple[str, int, str]] = []
    jobs.register(
        "tests.flaky", lambda run: ran.append((run.occurrence_key, run.attempt, run.trigger))
    )
    run_due(clock, jobs=jobs)
    assert ran == [(str(dead.pk), 2, Trigger.MANUAL)]
    attempts = list(
        Attempt.objects.filter(occurrence=dead).values_list("number", "trigger", "outcome")
    )
    assert attempts == [(1, "schedule", "failed"), (2, "manual", "succeeded")]
    audit = AuditRecord.objects.get(action="replay")
    assert (audit.actor, audit.reason, audit.target_id, audit.tenant) == (
        "root",
        "partner API is back",
        str(dead.pk),
        "acme",
    )
    assert audit.after == {"state": "scheduled", "next_attempt": 2, "trigger": "manual"}


def test_replay_needs_a_reason_and_a_finished_occurrence(admin, dead, clock):
    """A blank reason is refused, and so is a second replay while the first is pending."""
    with pytest.raises(JobsError, match="reason: say why"):
        services.replay(dead, actor=admin, reason="  ", now=clock.now())
    services.replay(dead, actor=admin, reason="again", now=clock.now())
    dead.refresh_from_db()
    with pytest.raises(JobsError, match="is scheduled: only a dead, failed, skipped"):
        services.replay(dead, actor=admin, reason="twice", now=clock.now())
    assert AuditRecord.objects.filter(action="replay").count() == 1


def test_without_permission_replay_is_refused_and_nothing_changes(alice, dead, clock):
    with pytest.raises(Forbidden, match=r"alice may not replay schedule acme/acme\.nightly"):
        services.replay(dead, actor=alice, reason="let me", now=clock.now())
    dead.refresh_from_db()
    assert dead.state == OccurrenceState.DEAD
    assert not AuditRecord.objects.filter(action="replay").exists()


def test_a_replayed_retired_one_off_runs_again_and_retires_again(root, clock, registered) -> None:
    """Replay makes the retired one-off active (audited) until its new attempt is final."""
    registered("tests.stepped", lambda run: None, runtime=True)
    clock.set(T0)
    services.upsert_schedule(
        declaration("once", job="tests.stepped", timing=at(T0)),
        actor=root,
        reason="test",
        now=T0,
    )
    run_due(clock, jobs=jobs_with_steps())
    retention_pass(clock)
    occurrence = Occurrence.objects.get()
    services.replay(occurrence, actor=root, reason="the partner lost it", now=clock.now())
    schedule = Schedule.objects.get(key="once")
    assert schedule.status == ScheduleStatus.ACTIVE
    assert schedule.retired_at is None
    audit = AuditRecord.objects.get(action="replay")
    assert (audit.before["schedule_status"], audit.after["schedule_status"]) == (
        "retired",
        "active",
    )
    assert retention_pass(clock).retired == 0  # replay pending
    run_due(clock, jobs=jobs_with_steps())
    assert Attempt.objects.filter(occurrence=occurrence).count() == 2
    assert retention_pass(clock).retired == 1


def test_a_retired_recurring_schedule_refuses_replay(root, clock) -> None:
    """No replica runs a retired schedule's occurrences: refused, the occurrence as it was."""
    clock.set(T0)
    schedule = ScheduleFactory.create(job="tests.stepped", next_due_at=T0)
    run_due(clock, jobs=jobs_with_steps())
    Schedule.objects.filter(pk=schedule.pk).update(status=ScheduleStatus.RETIRED)
    with pytest.raises(JobsError, match="is retired: no replica runs its occurrences"):
        services.replay(Occurrence.objects.get(), actor=root, reason="x", now=clock.now())
    assert Occurrence.objects.get().state == OccurrenceState.COMPLETED


# --- replay of any planned instant: services.replay_at ------------------------------------


def test_a_summarised_skipped_instant_runs_once_under_its_own_identity(
    root, summarised, clock
) -> None:
    """An instant without a row gets one, runs once, is audited; replayed again, attempt 2."""
    occurrence = services.replay_at(
        summarised, at=FIRST, actor=root, reason="the 12:01 sync is needed", now=clock.now()
    )
    identity = occurrence_id("acme", "acme.sync", FIRST)
    assert occurrence.pk == identity
    assert (occurrence.state, occurrence.trigger, occurrence.scheduled_at) == (
        OccurrenceState.SCHEDULED,
        "manual",
        FIRST,
    )
    ran: list[tuple[str, int, str]] = []
    run_due(clock, jobs=counting(ran))
    run_due(clock, jobs=counting(ran))
    assert ran == [(str(identity), 1, "manual")]
    assert Occurrence.objects.get(pk=identity).state == OccurrenceState.COMPLETED
    audit = AuditRecord.objects.get(action="replay")
    assert (audit.actor, audit.target_id, audit.reason) == (
        "root",
        str(identity),
        "the 12:01 sync is needed",
    )
    assert audit.after["created"] is True
    assert audit.after["scheduled_at"] == FIRST.isoformat()
    # Again: now it has a row, so it is attempt 2 of the same occurrence.
    services.replay_at(summarised, at=FIRST, actor=root, reason="again", now=clock.now())
    run_due(clock, jobs=counting(ran))
    assert ran[1:] == [(str(identity), 2, "manual")]
    assert Attempt.objects.filter(occurrence_id=identity).count() == 2


def test_the_recovery_point_does_not_move_so_the_planner_still_plans_what_is_due(
    root, clock
) -> None:
    """12:02 replayed before the planner got to it: 12:01 to 12:03 planned, 12:02 run once."""
    schedule = ScheduleFactory.create(job="tests.counted", next_due_at=T0)
    clock.set(T0)
    run_due(clock, jobs=counting([]))  # planned and ran T0
    clock.set(T0 + timedelta(minutes=3))
    services.replay_at(
        schedule, at=T0 + timedelta(minutes=2), actor=root, reason="early", now=clock.now()
    )
    ran: list[tuple[str, int, str]] = []
    run_due(clock, jobs=counting(ran))
    planned = sorted(Occurrence.objects.values_list("scheduled_at", flat=True))
    assert planned == [T0 + timedelta(minutes=m) for m in range(4)]
    assert len(ran) == 3  # 12:01, 12:02 (replayed, once) and 12:03


def test_an_instant_the_timing_does_not_produce_is_refused_naming_the_nearest(
    root, summarised, clock
) -> None:
    """The error names the schedule and the instants either side; no row, no audit."""
    wrong = FIRST + timedelta(seconds=30)
    with pytest.raises(JobsError) as refused:
        services.replay_at(summarised, at=wrong, actor=root, reason="x", now=clock.now())
    message = str(refused.value)
    assert "acme/acme.sync" in message
    assert f"{wrong.isoformat()} is not an instant of its timing" in message
    assert (
        f"the nearest are {FIRST.isoformat()} and {(FIRST + timedelta(minutes=1)).isoformat()}"
        in message
    )
    assert not Occurrence.objects.filter(scheduled_at=wrong).exists()
    assert not AuditRecord.objects.filter(action="replay").exists()


def test_a_future_instant_is_refused(root, summarised, clock) -> None:
    later = clock.now() + timedelta(minutes=10)
    with pytest.raises(JobsError, match="is in the future; it runs at its time"):
        services.replay_at(summarised, at=later, actor=root, reason="x", now=clock.now())


def test_replay_at_needs_the_replay_permission(summarised, clock) -> None:
    """A staff user without it is refused, and no row is made."""
    viewer = User.objects.create_user("viewer", is_staff=True)
    with pytest.raises(Exception, match="replay"):
        services.replay_at(summarised, at=FIRST, actor=viewer, reason="x", now=clock.now())
    assert not Occurrence.objects.filter(scheduled_at=FIRST).exists()


# --- `jobs replay KEY --at`: the command calling replay_at --------------------------------


def replay_cli(at: str, *extra: str) -> str:
    """``jobs replay acme.sync --tenant acme --at AT`` as root."""
    out = StringIO()
    call_command(
        "jobs",
        *("replay", "acme.sync", "--tenant", "acme", "--at", at),
        *("--actor", "root", "--reason", "backfill", *extra),
        stdout=out,
    )
    return out.getvalue()


def test_jobs_replay_key_at_instant(root, summarised) -> None:
    """``--at`` in another offset replays that instant, as a new manual occurrence (JSON)."""
    out = json.loads(replay_cli("2026-03-01T13:01:00+01:00", "--json"))
    assert out["occurrence"] == str(occurrence_id("acme", "acme.sync", FIRST))
    assert out["scheduled_at"] == FIRST.isoformat()
    assert (out["state"], out["next_attempt"], out["trigger"]) == ("scheduled", 1, "manual")


@pytest.mark.parametrize(
    ("at", "error"),
    [
        (
            "2026-03-01T12:01:30Z",
            "the nearest are 2026-03-01T12:01:00+00:00 and 2026-03-01T12:02:00",
        ),
        ("2026-03-01T12:01:00", "has no UTC offset"),
        ("yesterday", "is not an ISO 8601 instant"),
    ],
)
def test_jobs_replay_refuses_a_wrong_instant_clearly(root, summarised, at, error) -> None:
    """Off the timing, without an offset, or not ISO 8601: a CommandError saying which."""
    with pytest.raises(CommandError, match=re.escape(error)):
        replay_cli(at)
    assert not AuditRecord.objects.filter(action="replay").exists()
