"""The admin's object pages (issue #37): the buttons that act on the object shown, what each
confirmation says it will do, and durations and instants in words on an occurrence's page.

The buttons themselves, clicked in Chromium, are in ``tests/test_browser_object_actions.py``.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from django_jobs import store
from django_jobs.models import AuditRecord, Occurrence, Schedule
from django_jobs.permissions import grant_tenant
from django_jobs.safe_error import SafeError
from django_jobs.testing import FakeClock, use_clock

from .factories import T0, ScheduleFactory, dead_occurrence
from .snapshots import snapshot
from .storeutil import claim, plan

pytestmark = pytest.mark.django_db

# The budget of a replay after one attempt, on the factory's retry policy (3 attempts, 30 s
# backoff doubling to at most 10 min).
BUDGET_FROM_2 = (
    "up to 3 attempts (2 to 4), 30 s backoff doubling to at most 10 min (each wait 50-100% of "
    "that), then dead letter"
)


@pytest.fixture
def acme() -> Schedule:
    return ScheduleFactory.create(tenant="acme", key="billing.nightly", job="billing.heartbeat")


def staff(name: str, *actions: str) -> Client:
    """A client logged in as staff holding ``actions`` on tenant acme (nothing elsewhere)."""
    user = User.objects.create_user(name, password="pw", is_staff=True)
    group = Group.objects.create(name=f"{name}-acme")
    user.groups.add(group)
    grant_tenant(group, "acme", *actions)
    client = Client()
    client.force_login(user)
    return client


def url(model: str, view: str, obj: Any) -> str:
    return reverse(f"admin:django_jobs_{model}_{view}", args=[obj.pk])


def page_of(client: Client, model: str, obj: Any) -> str:
    response = client.get(url(model, "change", obj))
    assert response.status_code == 200
    return response.content.decode()


def readonly(page: str, field: str) -> str:
    """The value a change page shows for read-only ``field``."""
    block = page.split(f"field-{field}", 1)[1]
    return block.split('<div class="readonly">', 1)[1].split("</div>", 1)[0].strip()


def inline_cells(page: str, field: str) -> list[str]:
    """The values of the Attempts inline's column ``field``, one per attempt."""
    cells = page.split(f'<td class="field-{field}">')[1:]
    return [c.split("<p>", 1)[1].split("</p>", 1)[0].strip() for c in cells]


def twice_failed(schedule: Schedule) -> Occurrence:
    """Scheduled at T0, first started 85.681976 s late; attempt 1 ran 2.5 s and failed,
    attempt 2 (five minutes later) ran 43 ms and went dead."""
    plan(schedule, T0, now=T0)
    first = T0 + timedelta(seconds=85.681976)
    (lease,) = claim("replica-1", first)
    store.mark_started([lease], now=first)
    store.fail(
        lease,
        now=first + timedelta(seconds=2.5),
        error=SafeError("RuntimeError", "ledger closed"),
        retry_at=T0 + timedelta(minutes=5),
    )
    second = T0 + timedelta(minutes=5)
    (lease,) = claim("replica-2", second)
    store.mark_started([lease], now=second)
    store.dead_letter(
        lease, now=second + timedelta(milliseconds=43), error=SafeError("RuntimeError", "again")
    )
    return Occurrence.objects.get(schedule=schedule)


# --- words on the occurrence page --------------------------------------------------------------


def test_the_occurrence_page_shows_its_lateness_and_each_attempts_duration_in_words(
    root_client, acme
) -> None:
    page = page_of(root_client, "occurrence", twice_failed(acme))
    assert readonly(page, "lateness") == "1 min 26 s"
    assert inline_cells(page, "duration") == ["2.5 s", "43 ms"]
    assert "0:01:25" not in page
    assert "0:00:02.5" not in page


def test_an_occurrence_not_started_yet_is_not_late_yet(root_client, acme) -> None:
    plan(acme, T0, now=T0)
    page = page_of(root_client, "occurrence", Occurrence.objects.get())
    assert readonly(page, "lateness") == "not started"


def test_the_occurrence_page_shows_its_instants_to_the_second_in_utc(root_client, acme) -> None:
    page = page_of(root_client, "occurrence", twice_failed(acme))
    assert readonly(page, "scheduled_at") == "2026-03-01 12:00:00 UTC"
    assert inline_cells(page, "started_at") == [
        "2026-03-01 12:01:25 UTC",
        "2026-03-01 12:05:00 UTC",
    ]
    assert inline_cells(page, "finished_at") == [
        "2026-03-01 12:01:28 UTC",
        "2026-03-01 12:05:00 UTC",
    ]


def test_the_schedules_list_says_how_late_in_words(root_client, acme) -> None:
    plan(acme, T0, now=T0)  # due at T0, not started
    with use_clock(FakeClock(T0 + timedelta(seconds=85.681976))):
        page = root_client.get(reverse("admin:django_jobs_schedule_changelist")).content.decode()
    (row,) = [r for r in page.split("<tr") if ">acme/billing.nightly<" in r]
    assert ">1 min 26 s late<" in row


# --- what each confirmation says ---------------------------------------------------------------


def first_step(client: Client, model: str, action: str, obj: Any) -> str:
    """The confirmation page of a list action on ``obj``."""
    response = client.post(
        reverse(f"admin:django_jobs_{model}_changelist"),
        {"action": action, "_selected_action": [obj.pk]},
    )
    assert response.status_code == 200
    return response.content.decode()


def consequences_shown(page: str) -> list[str]:
    """The sentences of a confirmation page, one per object."""
    items = page.split('<span class="jobs-consequence">')[1:]
    return [i.split("</span>", 1)[0].replace("&#x27;", "'") for i in items]


def test_the_replay_confirmation_says_which_attempt_runs_and_that_the_budget_starts_afresh(
    root_client, acme
) -> None:
    occurrence = dead_occurrence(acme)
    (said,) = consequences_shown(first_step(root_client, "occurrence", "replay", occurrence))
    assert said == (
        f"Occurrence {occurrence.pk} (dead after 1 attempt) becomes due now and runs as attempt "
        "2, trigger manual, under the same identity (its command's idempotency key). The "
        f"retry budget starts afresh: {BUDGET_FROM_2}. A replica claims it at its next pass."
    )


def test_the_replay_confirmation_after_three_attempts_names_attempts_4_to_6(
    root_client, acme
) -> None:
    occurrence = dead_occurrence(acme)
    Occurrence.objects.filter(pk=occurrence.pk).update(attempts=3)  # as after a full budget
    (said,) = consequences_shown(first_step(root_client, "occurrence", "replay", occurrence))
    assert "runs as attempt 4, trigger manual" in said
    assert "The retry budget starts afresh: up to 3 attempts (4 to 6)," in said


def test_the_cancel_confirmation_says_a_waiting_occurrence_will_not_run(root_client, acme) -> None:
    plan(acme, T0, now=T0)
    occurrence = Occurrence.objects.get()
    (said,) = consequences_shown(first_step(root_client, "occurrence", "cancel", occurrence))
    assert said == (
        f"Occurrence {occurrence.pk} (scheduled, waiting) will not run: it is recorded "
        "cancelled, and can be replayed later."
    )


def test_the_schedule_confirmations_say_what_disable_enable_and_run_now_do(
    root_client, acme
) -> None:
    (disable,) = consequences_shown(first_step(root_client, "schedule", "disable_schedules", acme))
    assert disable.startswith("No replica claims acme/billing.nightly's occurrences")
    assert "an occurrence already running finishes" in disable
    (enable,) = consequences_shown(first_step(root_client, "schedule", "enable_schedules", acme))
    assert enable.startswith("Replicas claim acme/billing.nightly's occurrences again")
    (run,) = consequences_shown(first_step(root_client, "schedule", "run_now", acme))
    assert run.endswith(
        "Its retry budget: up to 3 attempts (1 to 3), 30 s backoff doubling to at most 10 min "
        "(each wait 50-100% of that), then dead letter. A replica claims it at its next pass."
    )


def test_the_message_after_a_replay_names_the_attempt_and_its_budget(root_client, acme) -> None:
    occurrence = dead_occurrence(acme)
    done = root_client.post(
        reverse("admin:django_jobs_occurrence_changelist"),
        {"action": "replay", "_selected_action": [occurrence.pk], "confirm": "yes", "reason": "r"},
        follow=True,
    )
    assert (
        f"Replayed {occurrence.pk}: attempt 2 is due now. The retry budget starts afresh: "
        f"{BUDGET_FROM_2}."
    ) in done.content.decode()


def disabled(schedule: Schedule) -> None:
    """``schedule`` disabled by someone earlier (no audit record of it here)."""
    Schedule.objects.filter(pk=schedule.pk).update(
        enabled=False, disabled_by="ops", disabled_reason="outage", disabled_at=T0
    )


# --- the buttons: who sees which ---------------------------------------------------------------


def buttons(page: str) -> list[str]:
    """The object-action buttons a page shows, by slug."""
    return [b.split('"', 1)[0] for b in page.split('<button type="submit" class="jobs-')[1:]]


def test_an_occurrence_page_offers_replay_when_finished_and_cancel_while_unfinished(
    root_client, acme
) -> None:
    dead = dead_occurrence(acme)
    plan(acme, T0 + timedelta(hours=1), now=T0)
    waiting = Occurrence.objects.get(state="scheduled")
    assert buttons(page_of(root_client, "occurrence", dead)) == ["replay"]
    assert buttons(page_of(root_client, "occurrence", waiting)) == ["cancel"]
    (lease,) = claim("w", T0 + timedelta(hours=1))
    assert buttons(page_of(root_client, "occurrence", waiting)) == ["cancel"]  # processing
    store.complete([lease], now=T0 + timedelta(hours=1, seconds=1))
    assert buttons(page_of(root_client, "occurrence", waiting)) == ["replay"]


def test_a_retired_recurring_schedules_occurrence_offers_no_replay(root_client, acme) -> None:
    dead = dead_occurrence(acme)
    Schedule.objects.filter(pk=acme.pk).update(status="retired")
    assert buttons(page_of(root_client, "occurrence", dead)) == []  # the service refuses it


def test_an_occurrence_page_offers_only_what_its_user_may_do_on_that_schedule(acme) -> None:
    dead = dead_occurrence(acme)
    plan(acme, T0 + timedelta(hours=1), now=T0)
    waiting = Occurrence.objects.get(state="scheduled")
    viewer = staff("vera", "view")
    assert buttons(page_of(viewer, "occurrence", dead)) == []
    assert buttons(page_of(viewer, "occurrence", waiting)) == []
    replayer = staff("rita", "view", "replay")
    assert buttons(page_of(replayer, "occurrence", dead)) == ["replay"]
    assert buttons(page_of(replayer, "occurrence", waiting)) == []  # cancel needs disable
    disabler = staff("dora", "view", "disable")
    assert buttons(page_of(disabler, "occurrence", dead)) == []
    assert buttons(page_of(disabler, "occurrence", waiting)) == ["cancel"]


def test_a_schedule_page_offers_disable_or_enable_by_its_state_and_run_now_by_permission(
    root_client, acme
) -> None:
    assert buttons(page_of(root_client, "schedule", acme)) == ["disable", "run-now"]
    disabled(acme)
    assert buttons(page_of(root_client, "schedule", acme)) == ["enable"]
    Schedule.objects.filter(pk=acme.pk).update(
        enabled=True, disabled_by="", disabled_reason="", disabled_at=None
    )
    assert buttons(page_of(staff("dora", "view", "disable"), "schedule", acme)) == ["disable"]
    assert buttons(page_of(staff("rob", "view", "run"), "schedule", acme)) == ["run-now"]


# --- the buttons' URLs -------------------------------------------------------------------------


def test_the_replay_button_confirms_replays_and_returns_to_the_occurrence(root_client, acme):
    occurrence = dead_occurrence(acme)
    first = root_client.post(url("occurrence", "replay", occurrence))
    assert first.status_code == 200
    page = first.content.decode()
    (said,) = consequences_shown(page)
    assert f"The retry budget starts afresh: {BUDGET_FROM_2}." in said
    assert Occurrence.objects.get().state == "dead"  # nothing yet
    with use_clock(FakeClock(T0 + timedelta(hours=1))):
        done = root_client.post(
            url("occurrence", "replay", occurrence), {"confirm": "yes", "reason": "template back"}
        )
    assert done.status_code == 302
    assert done["Location"] == url("occurrence", "change", occurrence)
    assert Occurrence.objects.get().state == "scheduled"
    record = AuditRecord.objects.get(action="replay")
    assert (record.actor, record.reason, record.target_type, record.target_id) == (
        "root",
        "template back",
        "occurrence",
        str(occurrence.pk),
    )
    assert record.at == T0 + timedelta(hours=1)


def test_each_schedule_button_acts_through_its_service_with_the_lists_message(
    root_client, acme
) -> None:
    def act(view: str, **data: str) -> str:
        with use_clock(FakeClock(T0)):
            done = root_client.post(url("schedule", view, acme), data, follow=True)
        assert done.redirect_chain == [(url("schedule", "change", acme), 302)]
        return str(done.content.decode())

    assert "Disabled acme/billing.nightly." in act("disable", confirm="yes", reason="outage")
    assert Schedule.objects.get().enabled is False
    assert "Enabled acme/billing.nightly." in act("enable", confirm="yes", reason="back")
    assert "Planned a run of acme/billing.nightly." in act("run_now", confirm="yes", reason="now")
    assert Occurrence.objects.get(schedule=acme).scheduled_at == T0
    assert list(AuditRecord.objects.order_by("id").values_list("action", "reason")) == [
        ("disable", "outage"),
        ("enable", "back"),
        ("run_now", "now"),
    ]


def test_the_run_now_button_asks_for_optional_arguments(root_client, acme) -> None:
    page = root_client.post(url("schedule", "run_now", acme)).content.decode()
    assert 'name="args"' in page


def test_a_button_the_state_no_longer_fits_is_refused_with_the_services_message(
    root_client, acme
) -> None:
    plan(acme, T0, now=T0)
    waiting = Occurrence.objects.get()
    before = snapshot()
    done = root_client.post(
        url("occurrence", "replay", waiting), {"confirm": "yes", "reason": "r"}, follow=True
    )
    assert "only a dead, failed, skipped, completed or cancelled occurrence can be replayed" in (
        done.content.decode()
    )
    assert snapshot() == before


@pytest.mark.parametrize(
    ("model", "view", "holds"),
    [
        ("occurrence", "replay", ("view", "disable")),
        ("occurrence", "cancel", ("view", "replay")),
        ("schedule", "disable", ("view", "run")),
        ("schedule", "enable", ("view", "run")),
        ("schedule", "run_now", ("view", "disable")),
    ],
)
def test_a_crafted_post_without_the_permission_is_refused_and_changes_nothing(
    acme, model, view, holds
) -> None:
    dead_occurrence(acme)
    plan(acme, T0 + timedelta(hours=1), now=T0)
    obj: Any = acme if model == "schedule" else None
    if view == "replay":
        obj = Occurrence.objects.get(state="dead")
    elif view == "cancel":
        obj = Occurrence.objects.get(state="scheduled")
    if view == "enable":
        disabled(acme)
    client = staff("mallory", *holds)
    before = snapshot()
    for data in ({}, {"confirm": "yes", "reason": "crafted"}):
        assert client.post(url(model, view, obj), data).status_code == 403
    assert snapshot() == before
    assert not AuditRecord.objects.exists()


def test_a_button_url_of_another_tenants_object_is_not_found(acme) -> None:
    globex = ScheduleFactory.create(tenant="globex", key="billing.nightly", job="billing.heartbeat")
    theirs = dead_occurrence(globex)
    client = staff("alice", "view", "replay", "disable", "run")
    before = snapshot()
    data = {"confirm": "yes", "reason": "crafted"}
    assert client.post(url("occurrence", "replay", theirs), data).status_code == 404
    assert client.post(url("schedule", "disable", globex), data).status_code == 404
    for forged in ("zz", "00000000-0000-0000-0000-000000000000", "\x00", "9" * 40):
        path = reverse("admin:django_jobs_occurrence_replay", args=[forged])
        assert client.post(path, data).status_code == 404
    assert snapshot() == before
    assert not AuditRecord.objects.exists()


def test_the_button_urls_take_only_a_post_with_its_csrf_token(acme) -> None:
    occurrence = dead_occurrence(acme)
    root = User.objects.create_superuser("root", "root@example.com", "pw")
    client = Client(enforce_csrf_checks=True)
    client.force_login(root)
    assert client.get(url("occurrence", "replay", occurrence)).status_code == 405
    data = {"confirm": "yes", "reason": "no token"}
    assert client.post(url("occurrence", "replay", occurrence), data).status_code == 403
    assert Occurrence.objects.get().state == "dead"
    assert not AuditRecord.objects.exists()


def test_the_schedule_page_shows_its_policy_durations_in_words(root_client) -> None:
    schedule = ScheduleFactory.create(
        max_delay=timedelta(minutes=5),
        backoff=timedelta(seconds=30),
        timeout=timedelta(minutes=15),
    )
    page = root_client.get(f"/admin/django_jobs/schedule/{schedule.pk}/change/").content.decode()
    for field, shown in (("max_delay", "5 min"), ("backoff", "30 s"), ("timeout", "15 min")):
        cell = page.split(f'field-{field}"', 1)[1].split('<div class="readonly">', 1)[1]
        assert cell.split("</div>", 1)[0] == shown, field
    # A raw timedelta would read "0:05:00"; the page's timestamps ("20:05:00 UTC") must not
    # count, so the match may not follow a digit.
    assert not re.search(r"(?<!\d)0:(05|15):00", page)


def test_the_schedule_page_shows_a_running_occurrence_only_while_it_runs(root_client) -> None:
    schedule = ScheduleFactory.create(overlap="queue")
    plan(schedule, T0, now=T0)
    (lease,) = claim("w", T0)

    def shown() -> str:
        page = root_client.get(f"/admin/django_jobs/schedule/{schedule.pk}/change/")
        cell = page.content.decode().split('field-running"', 1)[1]
        return str(cell.split('<div class="readonly">', 1)[1].split("</div>", 1)[0])

    assert shown() == str(lease.occurrence_id)
    store.complete([lease], now=T0 + timedelta(seconds=1))
    assert Schedule.objects.get(pk=schedule.pk).running_occurrence == lease.occurrence_id
    assert shown() == "-"  # the column keeps it; the page says nothing runs


def test_an_occurrences_name_reads_its_instant_in_words(root_client, acme) -> None:
    occurrence = dead_occurrence(acme)
    page = page_of(root_client, "occurrence", occurrence)
    assert "acme/billing.nightly at 2026-03-01 12:00:00 UTC" in page  # heading and breadcrumb
    assert "+00:00" not in page.split("<h1>", 1)[1].split("</h2>", 1)[0]
