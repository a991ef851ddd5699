"""``manage.py jobs`` as an on-call operator reads it (issue #37): ``jobs list``'s columns and
filters, ``jobs inspect``'s one ``next_runs`` field and its next steps, durations and instants
in words, the retry budget a replay gets, and ``jobs cancel``.

Instants are written out by hand, never computed by the code under test. The clock is a
``FakeClock`` at ``NOW``, a minute and 26.4 seconds after ``T0`` (Sunday 2026-03-01 12:00
UTC).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from guardian.shortcuts import assign_perm

from django_jobs import rrule, services, store
from django_jobs.models import Attempt, AuditRecord, Limit, Occurrence, Schedule
from django_jobs.permissions import grant_tenant
from django_jobs.safe_error import SafeError
from django_jobs.testing import FakeClock, use_clock

from .factories import T0, ScheduleFactory, declaration
from .storeutil import claim, plan

pytestmark = pytest.mark.django_db

NOW = T0 + timedelta(seconds=86.4)
BOOM = SafeError("RuntimeError", "boom")


@pytest.fixture(autouse=True)
def clock() -> Any:
    with use_clock(FakeClock(NOW)) as injected:
        yield injected


@pytest.fixture
def ops() -> User:
    return User.objects.create_superuser("ops", "ops@example.com", "x")


def jobs(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out)
    return out.getvalue()


def said(*args: str) -> str:
    """What ``jobs`` prints, its wrapped lines joined: the sentences as one reads them."""
    return " ".join(jobs(*args).split())


def schedule(key: str, tenant: str = "acme", **fields: Any) -> Schedule:
    """An enabled one-minute schedule from T0 with a three-attempt retry budget."""
    return ScheduleFactory.create(tenant=tenant, key=key, job="billing.heartbeat", **fields)


def ended(
    row: Schedule, at: datetime, *, outcome: str, ran: timedelta = timedelta(0)
) -> Occurrence:
    """The occurrence of ``row`` at ``at``, claimed at ``at`` and ended ``ran`` later: completed,
    failed (waiting for a retry a minute on) or dead."""
    plan(row, at, now=at)
    (lease,) = claim("w1", at)
    end = at + ran
    if outcome == "completed":
        store.complete([lease], now=end)
    elif outcome == "failed":
        store.fail(lease, now=end, error=BOOM, retry_at=end + timedelta(minutes=1))
    else:
        store.dead_letter(lease, now=end, error=BOOM)
    return Occurrence.objects.get(schedule=row, scheduled_at=at)


def listed(*args: str) -> dict[str, Any]:
    listing: dict[str, Any] = json.loads(jobs("list", "--actor", "ops", "--json", *args))
    return listing


def keys(*args: str) -> list[str]:
    return [row["key"] for row in listed(*args)["schedules"]]


def inspected(key: str, *args: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(
        jobs("inspect", key, "--tenant", "acme", "--actor", "ops", "--json", *args)
    )
    return report


# --- jobs list ------------------------------------------------------------------------------


@pytest.fixture
def fleet(ops) -> dict[str, Schedule]:
    """healthy (completed), poison (dead), flaky (failed, waiting), recovered (a dead letter,
    then completed), paused (disabled by ops), broken (parked on its timing)."""
    rows = {
        name: schedule(name)
        for name in ("healthy", "poison", "flaky", "recovered", "paused", "broken")
    }
    ended(rows["healthy"], T0, outcome="completed")
    ended(rows["poison"], T0, outcome="dead")
    ended(rows["flaky"], T0, outcome="failed")
    ended(rows["recovered"], T0 - timedelta(minutes=1), outcome="dead")
    ended(rows["recovered"], T0, outcome="completed")
    services.disable(rows["paused"], actor=ops, reason="partner outage", now=T0)
    Schedule.objects.filter(pk=rows["broken"].pk).update(
        parked_field="timing.interval", parked_reason="RefusedRow: not a duration", next_due_at=None
    )
    return rows


def test_jobs_list_shows_outcome_streak_dead_letters_state_and_next_run_in_words(fleet) -> None:
    lines = jobs("list", "--actor", "ops").splitlines()
    assert lines[0].split() == [
        "SCHEDULE", "JOB", "STATUS", "ENABLED", "PARKED", "QUEUE", "LAST", "OUTCOME",
        "FAILING", "DEAD", "NEXT", "RUN",
    ]  # fmt: skip
    # Those that most need attention first: dead letters, then the failing streak.
    assert [line.split()[0] for line in lines[1:]] == [
        "acme/poison", "acme/recovered", "acme/flaky", "acme/broken", "acme/healthy",
        "acme/paused",
    ]  # fmt: skip
    cells = {line.split()[0]: line.split() for line in lines[1:]}
    # The next run of a one-minute schedule from T0 after NOW: 12:02:00, to the second.
    assert cells["acme/poison"][-9:] == [
        "enabled", "-", "default", "dead", "1", "1", "2026-03-01", "12:02:00", "UTC",
    ]  # fmt: skip
    assert cells["acme/flaky"][-9:-3] == ["enabled", "-", "default", "failed", "1", "0"]
    assert cells["acme/recovered"][-6:-3] == ["completed", "0", "1"]
    assert "  DISABLED by ops  " in next(line for line in lines if "acme/paused" in line)
    assert cells["acme/paused"][-1] == "-"  # a disabled schedule has no next run
    assert cells["acme/broken"][3:6] == ["enabled", "timing.interval", "default"]
    assert cells["acme/broken"][-1] == "-"  # nor a parked one


def test_jobs_list_shows_no_next_run_for_a_draft(ops) -> None:
    """No replica runs a draft, whatever its timing says: NEXT RUN is ``-``, ``next_run``
    null; the active schedule beside it has one."""
    schedule("idea", status="draft", decider="ops-lead", decide_by=T0.date())
    schedule("live")
    cells = {line.split()[0]: line.split() for line in jobs("list", "--actor", "ops").splitlines()}
    assert cells["acme/idea"][2] == "draft"
    assert cells["acme/idea"][-1] == "-"
    assert cells["acme/live"][-3:] == ["2026-03-01", "12:02:00", "UTC"]
    rows = {row["key"]: row for row in listed()["schedules"]}
    assert (rows["idea"]["next_run"], rows["live"]["next_run"]) == (
        None,
        "2026-03-01T12:02:00+00:00",
    )


def test_jobs_list_json_has_the_same_fields_as_numbers_and_iso_instants(fleet) -> None:
    data = listed()
    assert (data["more"], data["cap"], data["retired_not_listed"]) == (False, 200, 0)
    rows = {row["key"]: row for row in data["schedules"]}
    assert rows["poison"] | {"job": "billing.heartbeat"} == {
        "tenant": "acme",
        "key": "poison",
        "job": "billing.heartbeat",
        "queue": "default",
        "status": "active",
        "enabled": True,
        "disabled_by": None,
        "parked_field": None,
        "last_outcome": "dead",
        "failing_streak": 1,
        "dead_letters": 1,
        "dead_letters_capped": False,
        "next_run": "2026-03-01T12:02:00+00:00",
        "next_due_at": rows["poison"]["next_due_at"],
        "last_completed_at": None,
    }
    assert (rows["paused"]["enabled"], rows["paused"]["disabled_by"]) == (False, "ops")
    assert rows["broken"]["parked_field"] == "timing.interval"
    assert rows["healthy"]["last_completed_at"] == "2026-03-01T12:00:00+00:00"


def test_jobs_list_dead_shows_only_the_schedules_with_a_dead_letter(fleet) -> None:
    assert keys("--dead") == ["poison", "recovered"]
    assert "acme/healthy" not in jobs("list", "--actor", "ops", "--dead")


def test_jobs_list_failing_shows_those_whose_newest_ended_occurrence_failed_or_went_dead(
    fleet,
) -> None:
    assert keys("--failing") == ["poison", "flaky"]  # recovered completed since its dead letter
    assert keys("--failing", "--dead") == ["poison"]


def test_jobs_list_filters_by_tenant_and_queue_and_says_which_filter_found_nothing(
    fleet,
) -> None:
    schedule("mailer", tenant="globex", queue="mail")
    ended(Schedule.objects.get(key="mailer"), T0, outcome="dead")
    assert keys("--tenant", "globex") == ["mailer"]
    assert keys("--queue", "mail") == ["mailer"]
    assert keys("--tenant", "acme", "--queue", "mail") == []
    assert jobs("list", "--actor", "ops", "--tenant", "initech", "--dead").strip() == (
        "no schedules you may see in tenant 'initech' with a dead letter"
    )
    healthy = jobs("list", "--actor", "ops", "--tenant", "globex", "--failing", "--queue", "x")
    assert healthy.strip() == (
        "no schedules you may see in tenant 'globex' on queue 'x' whose newest ended "
        "occurrence failed or went dead"
    )


def test_jobs_list_shows_a_tenants_operator_only_that_tenant(fleet) -> None:
    schedule("mailer", tenant="globex")
    ended(Schedule.objects.get(key="mailer"), T0, outcome="dead")
    operator = User.objects.create_user("acme-ops")
    group = Group.objects.create(name="acme-ops")
    operator.groups.add(group)
    grant_tenant(group, "acme", "view")
    data = json.loads(jobs("list", "--actor", "acme-ops", "--json", "--dead"))
    assert [(r["tenant"], r["key"]) for r in data["schedules"]] == [
        ("acme", "poison"),
        ("acme", "recovered"),
    ]
    assert jobs("list", "--actor", "acme-ops", "--tenant", "globex").strip() == (
        "no schedules you may see in tenant 'globex'"
    )


def test_jobs_list_shows_at_most_200_lines_and_says_so(ops) -> None:
    Schedule.objects.bulk_create(
        [ScheduleFactory.build(tenant="acme", key=f"bulk.{n:03}") for n in range(201)]
    )
    ended(schedule("gone"), T0, outcome="dead")
    Schedule.objects.filter(key="gone").update(status="retired")
    text = jobs("list", "--actor", "ops").splitlines()
    assert len(text) == 1 + 200 + 2  # the header, the lines, what was left out
    assert text[-2] == (
        "the first 200 shown, those that most need attention first; more match: narrow with "
        "--tenant, --queue, --dead or --failing"
    )
    assert text[-1] == "1 retired schedule(s) not listed: jobs inspect KEY shows one"
    data = listed()
    assert (len(data["schedules"]), data["more"], data["retired_not_listed"]) == (200, True, 1)
    assert keys("--dead") == []  # a retired schedule's dead letter is not listed either


# --- jobs inspect: next_runs ----------------------------------------------------------------


def runs(data: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    return [(r["at"], r["local"], r["marks"]) for r in data["next_runs"]]


def test_inspect_next_runs_of_a_utc_cron_are_iso_instants(ops) -> None:
    schedule("hourly", timing_kind="cron", cron="0 * * * *", interval=None)
    data = inspected("hourly")
    assert runs(data)[:2] == [
        ("2026-03-01T13:00:00+00:00", "2026-03-01T13:00:00+00:00", []),
        ("2026-03-01T14:00:00+00:00", "2026-03-01T14:00:00+00:00", []),
    ]
    assert len(data["next_runs"]) == 10
    assert data["next_runs"][0]["utc_words"] == "Sun 2026-03-01 13:00:00 UTC"
    text = jobs("inspect", "hourly", "--tenant", "acme", "--actor", "ops")
    assert "  Sun 2026-03-01 13:00:00 UTC\n" in text  # a UTC schedule's run said once


def test_inspect_next_runs_of_a_local_cron_are_in_its_zone_with_dst_marked(ops, clock) -> None:
    services.upsert_schedule(declaration(tenant="acme"), actor=ops, reason="x", now=T0)
    clock.set(datetime(2026, 3, 6, 12, 0, tzinfo=UTC))  # New York springs forward on 03-08
    data = inspected("billing.nightly")
    assert runs(data)[:3] == [
        ("2026-03-06T14:00:00+00:00", "2026-03-06T09:00:00-05:00", []),
        ("2026-03-07T14:00:00+00:00", "2026-03-07T09:00:00-05:00", []),
        ("2026-03-08T13:00:00+00:00", "2026-03-08T09:00:00-04:00", ["DST starts: -05:00 → -04:00"]),
    ]
    text = jobs("inspect", "billing.nightly", "--tenant", "acme", "--actor", "ops")
    assert (
        "  Sun 2026-03-08 09:00:00 EDT = Sun 2026-03-08 13:00:00 UTC  [DST starts: -05:00 → -04:00]"
    ) in text.splitlines()


def test_inspect_next_runs_of_a_monthly_rrule_list_ten_runs_not_a_weeks_none(ops) -> None:
    timing = rrule(
        "FREQ=MONTHLY;BYMONTHDAY=15;BYHOUR=9",
        zone="America/New_York",
        skipped="shift",
        repeated="first",
        reason="statements on the 15th at 09:00 in New York",
    )
    services.upsert_schedule(
        declaration("billing.monthly", tenant="acme", timing=timing), actor=ops, reason="x", now=T0
    )
    data = inspected("billing.monthly")
    assert "next_runs_in_zone" not in data
    assert runs(data)[:2] == [
        ("2026-03-15T13:00:00+00:00", "2026-03-15T09:00:00-04:00", ["DST starts: -05:00 → -04:00"]),
        ("2026-04-15T13:00:00+00:00", "2026-04-15T09:00:00-04:00", []),
    ]
    assert len(data["next_runs"]) == 10


# --- jobs inspect: words and next steps -----------------------------------------------------


def test_inspect_prints_instants_and_lateness_in_words(ops) -> None:
    row = schedule("late", last_scheduled_at=T0)
    plan(row, T0, now=T0)  # due at T0, not started: 86.4 s late at NOW
    lines = jobs("inspect", "late", "--tenant", "acme", "--actor", "ops").splitlines()
    assert "last_scheduled_at: 2026-03-01 12:00:00 UTC" in lines
    assert "lateness: 1 min 26 s (the oldest due occurrence not started has waited so long)" in (
        lines
    )
    assert inspected("late")["lateness_seconds"] == 86.4
    assert any(line.startswith("  2026-03-01 12:00:00 UTC  scheduled") for line in lines)


def steps(key: str) -> list[str]:
    said: list[str] = inspected(key)["next_steps"]
    return said


def test_inspect_of_a_schedule_with_dead_letters_ends_with_list_dead_and_replay(fleet) -> None:
    dead = Occurrence.objects.get(schedule=fleet["poison"])
    assert steps("poison") == [
        "python manage.py jobs list --tenant acme --dead --actor ops",
        f"python manage.py jobs inspect poison --tenant acme --occurrence {dead.pk} --actor ops",
        f'python manage.py jobs replay {dead.pk} --reason "..." --actor ops',
        'python manage.py jobs disable poison --tenant acme --reason "..." --actor ops',
    ]
    text = said("inspect", "poison", "--tenant", "acme", "--actor", "ops")
    tail = text[text.index("next steps:") :]
    assert "It has 1 dead letter:" in tail
    # The replay's step says what services.consequences says of it (tests/test_consequences.py
    # holds its words): attempt N+1 and the fresh budget.
    assert " ".join(services.consequences.replay(dead, fleet["poison"]).split()) in tail
    assert "runs as attempt 2" in tail
    assert "The retry budget starts afresh: up to 3 attempts (2 to 4)" in tail
    assert text.endswith('jobs disable poison --tenant acme --reason "..." --actor ops')


def test_inspect_of_a_failing_schedule_ends_with_its_failed_run_and_disable(fleet) -> None:
    failed = Occurrence.objects.get(schedule=fleet["flaky"])
    assert steps("flaky") == [
        f"python manage.py jobs inspect flaky --tenant acme --occurrence {failed.pk} --actor ops",
        'python manage.py jobs disable flaky --tenant acme --reason "..." --actor ops',
    ]
    text = said("inspect", "flaky", "--tenant", "acme", "--actor", "ops")
    assert "Its newest run failed (1 in a row) and waits for a retry" in text


def test_inspect_of_a_disabled_schedule_ends_with_enable(fleet) -> None:
    assert steps("paused") == [
        'python manage.py jobs enable paused --tenant acme --reason "..." --actor ops'
    ]
    text = said("inspect", "paused", "--tenant", "acme", "--actor", "ops")
    assert "It is disabled by ops: partner outage. Enable it once that is resolved." in text
    assert "disabled: by ops at 2026-03-01 12:00:00 UTC: partner outage" in text


def test_inspect_of_a_parked_schedule_names_the_field_to_fix_then_enable(fleet) -> None:
    assert steps("broken") == [
        'python manage.py jobs enable broken --tenant acme --reason "..." --actor ops'
    ]
    text = said("inspect", "broken", "--tenant", "acme", "--actor", "ops")
    assert (
        "It is parked: the planner refused its timing.interval (RefusedRow: not a duration). "
        "Fix that field"
    ) in text


def test_inspect_of_a_healthy_schedule_ends_with_run_now_and_disable(fleet) -> None:
    assert steps("healthy") == [
        'python manage.py jobs run-now healthy --tenant acme --reason "..." --actor ops',
        'python manage.py jobs disable healthy --tenant acme --reason "..." --actor ops',
    ]


def test_inspect_of_a_draft_or_retired_schedule_ends_with_sync_not_run_now(ops) -> None:
    schedule("idea", status="draft", decider="ops-lead", decide_by=T0.date())
    schedule("gone", status="retired")
    assert steps("idea") == ["python manage.py jobs sync"]
    assert steps("gone") == ["python manage.py jobs sync"]
    assert "It is a draft: no replica runs it" in said(
        "inspect", "idea", "--tenant", "acme", "--actor", "ops"
    )


def test_inspect_suggests_purge_once_finished_occurrences_lie_beyond_the_limit(ops) -> None:
    row = schedule("kept")
    Limit.objects.create(schedule=row, keep_last=1)
    ended(row, T0, outcome="completed")
    assert not any(" purge " in step for step in steps("kept"))
    ended(row, T0 + timedelta(minutes=1), outcome="completed")  # T0's is beyond keep_last 1
    assert "python manage.py jobs purge kept --tenant acme --actor ops" in steps("kept")


def test_inspect_without_actor_names_no_actor_in_its_commands(fleet, settings) -> None:
    settings.DJANGO_JOBS = {"CLI_ACTOR": "ops"}
    out = StringIO()
    call_command("jobs", "inspect", "paused", "--tenant", "acme", "--json", stdout=out)
    assert json.loads(out.getvalue())["next_steps"] == [
        'python manage.py jobs enable paused --tenant acme --reason "..."'
    ]


def test_inspect_of_a_policy_record_offers_no_run_now(ops) -> None:
    """A job's ``@<job>`` record plans nothing, and a run-now of it would run its empty
    arguments: disable, not run-now."""
    enqueued: dict[str, Any] = {
        "timing_kind": "enqueued",
        "origin": "enqueue",
        "interval": None,
        "anchor": None,
    }
    schedule("@billing.send", **enqueued)
    assert steps("@billing.send") == [
        'python manage.py jobs disable @billing.send --tenant acme --reason "..." --actor ops'
    ]
    assert "Run it once more" not in said(
        "inspect", "@billing.send", "--tenant", "acme", "--actor", "ops"
    )


def test_inspect_of_a_timing_that_cannot_be_evaluated_names_it_and_offers_no_run_now(
    ops,
) -> None:
    """Stored but not parked yet (the planner parks it at its next pass): a declared one is
    fixed in its declaration and synced; a run-time one where it was written."""
    bad: dict[str, Any] = {"timing_kind": "cron", "cron": "99 99 * * *", "interval": None}
    schedule("declared-cron", origin="code", **bad)
    schedule("runtime-cron", **bad)
    assert steps("declared-cron") == [
        "python manage.py jobs sync",
        'python manage.py jobs disable declared-cron --tenant acme --reason "..." --actor ops',
    ]
    text = said("inspect", "declared-cron", "--tenant", "acme", "--actor", "ops")
    tail = text[text.index("next steps:") :]
    assert tail.startswith("next steps: - Its timing cannot be evaluated: ")
    assert (
        "No replica can plan it, and the planner parks it at its next pass. Fix the timing in "
        "its declaration, then sync. python manage.py jobs sync"
    ) in tail
    assert steps("runtime-cron") == [
        'python manage.py jobs disable runtime-cron --tenant acme --reason "..." --actor ops'
    ]
    text = said("inspect", "runtime-cron", "--tenant", "acme", "--actor", "ops")
    assert (
        "Fix the timing of this run-time schedule (services.upsert_schedule, or its admin page)."
        in text
    )
    assert "run-now" not in text


def operator_of_acme(name: str, *actions: str) -> User:
    """A user whose group is granted ``view`` and ``actions`` on tenant acme."""
    user = User.objects.create_user(name)
    group = Group.objects.create(name=name)
    grant_tenant(group, "acme", "view", *actions)
    user.groups.add(group)
    return user


def steps_as(user: str, key: str, *args: str) -> tuple[list[str], str]:
    """The next steps' commands (``--json``) and their text, as ``user`` reads them."""
    base = ("inspect", key, "--tenant", "acme", "--actor", user, *args)
    data = json.loads(jobs(*base, "--json"))
    text = said(*base)
    return data["next_steps"], text[text.index("next steps:") :]


def test_inspect_shows_a_viewer_only_the_steps_they_may_take_and_whom_to_ask(fleet) -> None:
    operator_of_acme("viewer")
    dead = Occurrence.objects.get(schedule=fleet["poison"])
    commands, tail = steps_as("viewer", "poison")
    assert commands == [
        "python manage.py jobs list --tenant acme --dead --actor viewer",
        f"python manage.py jobs inspect poison --tenant acme --occurrence {dead.pk} --actor viewer",
    ]
    assert tail.endswith(
        "(you may not replay or disable it: ask someone with replay_schedule / "
        "disable_schedule on it)"
    )
    assert tail.count("you may not") == 1
    assert steps_as("viewer", "healthy") == (
        [],
        "next steps: - (you may not run-now or disable it: ask someone with run_schedule / "
        "disable_schedule on it)",
    )
    assert steps_as("viewer", "paused") == (
        [],
        "next steps: - (you may not enable it: ask someone with disable_schedule on it)",
    )


def test_inspect_shows_an_operator_the_steps_their_grants_allow(fleet) -> None:
    operator_of_acme("replayer", "replay")
    dead = Occurrence.objects.get(schedule=fleet["poison"])
    commands, tail = steps_as("replayer", "poison")
    assert commands[-1] == f'python manage.py jobs replay {dead.pk} --reason "..." --actor replayer'
    assert tail.endswith("(you may not disable it: ask someone with disable_schedule on it)")
    operator_of_acme("runner", "run", "disable")
    commands, tail = steps_as("runner", "healthy")
    assert [c.split()[3] for c in commands] == ["run-now", "disable"]
    assert "you may not" not in tail


def test_inspect_of_an_occurrence_shows_a_viewer_no_cancel_or_replay(fleet) -> None:
    operator_of_acme("viewer")
    failed = Occurrence.objects.get(schedule=fleet["flaky"])
    commands, tail = steps_as("viewer", "flaky", "--occurrence", str(failed.pk))
    assert commands == ["python manage.py jobs inspect flaky --tenant acme --actor viewer"]
    assert tail.endswith(
        "(you may not cancel or replay it: ask someone with disable_schedule / "
        "replay_schedule on it)"
    )


def test_inspect_offers_purge_only_to_a_user_who_may_purge(ops) -> None:
    row = schedule("kept")
    Limit.objects.create(schedule=row, keep_last=1)
    ended(row, T0, outcome="completed")
    ended(row, T0 + timedelta(minutes=1), outcome="completed")
    operator_of_acme("keeper", "purge")
    assert (
        "python manage.py jobs purge kept --tenant acme --actor keeper"
        in (steps_as("keeper", "kept")[0])
    )
    operator_of_acme("viewer")
    commands, tail = steps_as("viewer", "kept")
    assert not any(" purge " in c for c in commands)
    assert tail.endswith(
        "(you may not purge, run-now or disable it: ask someone with purge_schedule / "
        "run_schedule / disable_schedule on it)"
    )


# --- jobs inspect --occurrence --------------------------------------------------------------


def test_inspect_of_an_occurrence_shows_attempt_durations_and_instants_in_words(ops) -> None:
    row = schedule("slow")
    occurrence = ended(row, T0, outcome="dead", ran=timedelta(seconds=85.6))
    text = jobs(
        "inspect", "slow", "--tenant", "acme", "--occurrence", str(occurrence.pk), "--actor", "ops"
    )
    assert "scheduled_at: 2026-03-01 12:00:00 UTC" in text.splitlines()
    token = Attempt.objects.get(occurrence=occurrence).fencing_token
    assert (
        f"  attempt 1 (token {token}, schedule) failed on w1: started 2026-03-01 12:00:00 UTC, "
        "ran 1 min 26 s: boom"
    ) in text.splitlines()
    data = inspected("slow", "--occurrence", str(occurrence.pk))
    assert data["attempts"][0]["duration_seconds"] == 85.6
    assert data["next_steps"] == [
        f'python manage.py jobs replay {occurrence.pk} --reason "..." --actor ops',
        "python manage.py jobs inspect slow --tenant acme --actor ops",
    ]


def test_inspect_of_an_unfinished_occurrence_ends_with_cancel(ops) -> None:
    row = schedule("waiting")
    (pk,) = plan(row, T0 + timedelta(minutes=5), now=T0)
    data = inspected("waiting", "--occurrence", str(pk))
    assert data["next_steps"][0] == f'python manage.py jobs cancel {pk} --reason "..." --actor ops'
    assert not any(" replay " in step for step in data["next_steps"])
    failed = ended(row, T0, outcome="failed")  # waiting for its retry: cancel, or replay now
    assert [s.split()[3] for s in steps_of(failed)] == ["cancel", "replay", "inspect"]


def steps_of(occurrence: Occurrence) -> list[str]:
    said: list[str] = inspected(occurrence.schedule.key, "--occurrence", str(occurrence.pk))[
        "next_steps"
    ]
    return said


# --- the answers of replay, cancel, disable, enable, run-now ---------------------------------


def test_replay_names_the_attempt_it_runs_and_its_fresh_retry_budget(ops) -> None:
    """The issue's replay: dead after 3 attempts, it runs attempts 4 to 6."""
    row = schedule("poison")
    plan(row, T0, now=T0)
    for attempt in range(3):
        (lease,) = claim("w1", T0 + timedelta(minutes=attempt))
        at = T0 + timedelta(minutes=attempt)
        if attempt < 2:
            store.fail(lease, now=at, error=BOOM, retry_at=at + timedelta(minutes=1))
        else:
            store.dead_letter(lease, now=at, error=BOOM)
    dead = Occurrence.objects.get(schedule=row)
    assert (dead.state, dead.attempts) == ("dead", 3)
    before = services.consequences.replay(dead, row)  # of the occurrence before the replay
    text = said("replay", str(dead.pk), "--actor", "ops", "--reason", "fixed")
    assert text == f"replayed {dead.pk} (scheduled at 2026-03-01 12:00:00 UTC): {before}"
    assert text.startswith(
        f"replayed {dead.pk} (scheduled at 2026-03-01 12:00:00 UTC): Occurrence {dead.pk} "
        "(dead after 3 attempts) becomes due now and runs as attempt 4"
    )
    assert "The retry budget starts afresh: up to 3 attempts (4 to 6)" in text


def test_replay_json_keeps_its_fields_and_adds_the_retry_budget(ops) -> None:
    dead = ended(schedule("poison"), T0, outcome="dead")
    data = json.loads(jobs("replay", str(dead.pk), "--actor", "ops", "--reason", "x", "--json"))
    assert data == {
        "occurrence": str(dead.pk),
        "scheduled_at": "2026-03-01T12:00:00+00:00",
        "state": "scheduled",
        "next_attempt": 2,
        "trigger": "manual",
        "retry_budget": {
            "max_attempts": 3,
            "first_attempt": 2,
            "last_attempt": 4,
            "backoff_seconds": 30.0,
            "max_backoff_seconds": 600.0,
        },
    }


def test_replay_at_an_instant_names_its_attempt_and_budget(ops) -> None:
    schedule("every-minute")
    text = jobs(
        "replay", "every-minute", "--tenant", "acme", "--at", "2026-03-01T12:01:00Z",
        "--actor", "ops", "--reason", "missed",
    )  # fmt: skip
    assert "(scheduled at 2026-03-01 12:01:00 UTC)" in text
    assert "runs as attempt 1, trigger manual" in text
    assert "The retry budget starts afresh: up to 3 attempts (1 to 3)" in text
    assert "A replica claims it at its next pass." in text
    Schedule.objects.filter(tenant="acme", key="every-minute").update(
        enabled=False, disabled_reason="maintenance"
    )
    again = jobs(
        "replay", "every-minute", "--tenant", "acme", "--at", "2026-03-01T12:00:00Z",
        "--actor", "ops", "--reason", "missed",
    )  # fmt: skip
    assert "It waits meanwhile: acme/every-minute is disabled" in again


def test_cancel_cancels_a_waiting_occurrence_audited_with_the_reason(ops) -> None:
    row = schedule("waiting")
    (pk,) = plan(row, T0 + timedelta(minutes=5), now=T0)
    text = jobs("cancel", str(pk), "--actor", "ops", "--reason", "duplicate run")
    assert text.strip() == (
        f"cancelled {pk} of acme/waiting: Occurrence {pk} (scheduled, waiting) will not run: it "
        "is recorded cancelled, and can be replayed later."
    )
    assert Occurrence.objects.get(pk=pk).state == "cancelled"
    audit = AuditRecord.objects.get(action="cancel")
    assert (audit.actor, audit.reason, audit.target_id, audit.at) == (
        "ops", "duplicate run", str(pk), NOW,
    )  # fmt: skip
    assert audit.before["state"] == "scheduled"


def test_cancel_json_says_what_it_was_and_is(ops) -> None:
    (pk,) = plan(schedule("waiting"), T0 + timedelta(minutes=5), now=T0)
    data = json.loads(jobs("cancel", str(pk), "--actor", "ops", "--reason", "x", "--json"))
    assert data == {
        "occurrence": str(pk),
        "schedule": "acme/waiting",
        "was": "scheduled",
        "state": "cancelled",
    }


def test_cancel_needs_the_disable_permission(ops) -> None:
    row = schedule("waiting")
    (pk,) = plan(row, T0 + timedelta(minutes=5), now=T0)
    viewer = User.objects.create_user("viewer")
    assign_perm("django_jobs.view_schedule", viewer, row)
    with pytest.raises(CommandError, match="viewer may not disable schedule"):
        jobs("cancel", str(pk), "--actor", "viewer", "--reason", "x")
    assert Occurrence.objects.get(pk=pk).state == "scheduled"
    assert not AuditRecord.objects.filter(action="cancel").exists()


def test_cancel_of_a_finished_occurrence_is_refused_naming_replay(ops) -> None:
    dead = ended(schedule("poison"), T0, outcome="dead")
    with pytest.raises(CommandError, match=f"occurrence {dead.pk} of acme/poison is dead"):
        jobs("cancel", str(dead.pk), "--actor", "ops", "--reason", "x")


def test_disable_enable_and_run_now_answer_with_what_they_do(ops) -> None:
    row = schedule("nightly")
    base = ["nightly", "--tenant", "acme", "--actor", "ops", "--reason"]
    assert jobs("disable", *base, "x").strip() == (
        "disabled acme/nightly: No replica claims acme/nightly's occurrences from its next "
        "pass, and none is planned while it is disabled; an occurrence already running "
        "finishes. Enabling it later plans what it missed by its misfire policy (skip: every "
        "missed occurrence is recorded as skipped, none runs)."
    )
    assert (
        jobs("enable", *base, "y")
        .strip()
        .startswith(
            "enabled acme/nightly: Replicas claim acme/nightly's occurrences again from their next "
            "pass; what it missed while disabled follows its misfire policy: skip"
        )
    )
    row.refresh_from_db()
    what = services.consequences.run_now(row)  # tests/test_consequences.py holds its words
    answer = jobs("run-now", *base, "z").strip()
    planned = Occurrence.objects.get(schedule__key="nightly", trigger="manual")
    assert answer == f"planned {planned.pk} at 2026-03-01 12:01:26 UTC: {what}"
    assert what.startswith(
        "An extra occurrence of acme/nightly at the current instant (its own identity, trigger "
        "manual)"
    )
    assert "the planned runs are unchanged. Its retry budget: up to 3 attempts (1 to 3)" in what


def test_jobs_help_names_cancel() -> None:
    from django_jobs.management.commands.jobs import Command

    assert "cancel" in Command.help.split(": ", 1)[1].replace(",", " ").split()
