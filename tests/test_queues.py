"""Queues (issue #36): work on a queue, claims of the replica's queues only, over an index
range, and a queue's fleet-wide limit held by concurrent claimers on separate connections.
The real replicas are in test_queues_processes.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import CommandError
from django.db import connection
from django.test import override_settings

from django_jobs import JobsError, enqueue, every, job, schedule
from django_jobs.clock import use_clock
from django_jobs.conf import get_settings
from django_jobs.declarations import InvalidSchedule
from django_jobs.exceptions import ConfigurationError
from django_jobs.management.commands.runworker import parse_queues
from django_jobs.models import Occurrence, OccurrenceState
from django_jobs.registry import JobPolicies, registry
from django_jobs.testing import FakeClock

from .concurrency import run_together
from .factories import RECORD_DEFAULTS, T0, ScheduleFactory
from .storeutil import LEASE, claim, explain_claim, plan

pytestmark = pytest.mark.django_db(transaction=True)


def _due(queue: str, count: int) -> list[Occurrence]:
    """``count`` occurrences of a schedule on ``queue``, all due at T0 + 1 minute."""
    record = ScheduleFactory.create(queue=queue)
    plan(record, *(T0 + timedelta(seconds=i) for i in range(count)), now=T0)
    return list(Occurrence.objects.filter(schedule=record))


NOW = T0 + timedelta(minutes=1)


def test_planned_occurrences_are_on_their_schedules_queue() -> None:
    mail, default = _due("mail", 2), _due("default", 1)
    assert {o.queue for o in mail} == {"mail"}
    assert {o.queue for o in default} == {"default"}


def test_a_claim_of_one_queue_takes_only_that_queues_work() -> None:
    mail, reports = _due("mail", 3), _due("reports", 3)
    taken = claim("r1", NOW, limit=10, queue="mail")
    assert {lease.occurrence_id for lease in taken} == {o.id for o in mail}
    assert {lease.queue for lease in taken} == {"mail"}
    # Every queue but the limited ones (claimed apart): here reports only is left.
    rest = claim("r2", NOW, limit=10, other_queues=["mail"])
    assert {lease.occurrence_id for lease in rest} == {o.id for o in reports}


def test_a_queue_limit_holds_between_two_claimers_on_two_connections() -> None:
    _due("reports", 6)

    def claimer(owner: str):
        return lambda: len(claim(owner, NOW, limit=5, queue="reports", max_running=2))

    took = run_together(claimer("r1"), claimer("r2"))
    assert sorted(took) in ([0, 2], [1, 1])  # two, between them: never four
    running = Occurrence.objects.filter(queue="reports", state=OccurrenceState.PROCESSING)
    assert running.count() == 2
    # Full: a third claim takes nothing while their leases are live.
    assert claim("r3", NOW, limit=5, queue="reports", max_running=2) == []


def test_a_lapsed_lease_holds_no_slot() -> None:
    _due("reports", 4)
    assert len(claim("r1", NOW, limit=5, queue="reports", max_running=2)) == 2
    later = NOW + LEASE + timedelta(seconds=1)  # r1 went silent: its leases lapsed
    assert len(claim("r2", later, limit=5, queue="reports", max_running=2)) == 2
    running = Occurrence.objects.filter(
        queue="reports", state=OccurrenceState.PROCESSING, lease_expires_at__gt=later
    )
    assert running.count() == 2


def test_a_limit_names_its_queue() -> None:
    with pytest.raises(ValueError, match="give its queue"):
        claim("r1", NOW, limit=5, max_running=2)


def _due_rows(schedule_pk: int, queue_sql: str) -> None:
    """50,000 due rows of ``schedule_pk``, row g (1, 2, ...) due g seconds before T0, each on
    the queue ``queue_sql`` (an SQL expression of g, its ``%`` written ``%%``); the
    statistics refreshed."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_jobs_occurrence (id, schedule_id, tenant, scheduled_at, state,"
            " skip_reason, trigger, due_at, lease_owner, fencing_token, attempts, failures,"
            " last_error_type, last_error_message, queue)"
            " SELECT gen_random_uuid(), %s, '', %s, 'scheduled', '', 'schedule',"
            f" %s - make_interval(secs => g), '', 0, 0, 0, '', '', {queue_sql}"
            " FROM generate_series(1, 50000) g",
            [schedule_pk, T0, T0],
        )
        cursor.execute("ANALYZE django_jobs_occurrence")


def _claim_plan(queue: str, limit: int) -> tuple[str, str]:
    """The plan of a claim of ``queue`` as the store runs it, and its walk of the occurrence
    table (the node that reads it)."""
    explained = explain_claim(NOW, limit=limit, queue=queue)
    walk = next(line for line in explained.splitlines() if "on django_jobs_occurrence o" in line)
    return explained, walk


def test_the_claim_of_one_queue_walks_its_index_range_among_many_other_rows() -> None:
    """The plan, not timing: 50,000 due rows of another queue are never read."""
    record, mine = ScheduleFactory.create(queue="bulk"), ScheduleFactory.create(queue="mail")
    _due_rows(record.pk, "'bulk'")
    plan(mine, T0, now=T0)
    explained, walk = _claim_plan("mail", limit=5)
    assert "Index Scan using django_jobs_occurrence_queue" in walk, explained
    assert "Index Cond: ((queue)::text = 'mail'::text)" in explained, explained
    assert "Seq Scan on django_jobs_occurrence" not in explained, explained
    assert [lease.queue for lease in claim("r1", NOW, limit=5, queue="mail")] == ["mail"]


def test_the_claim_of_one_queue_walks_its_index_range_when_the_queues_are_interleaved() -> None:
    """Ten queues' rows interleaved (row n on queue n mod 10), as the statistics of a busy
    fleet say: the claim index filtered by queue looks as cheap to the planner, and walks
    every other queue's rows where one queue's are behind them. The claim orders by an
    expression only django_jobs_occurrence_queue holds (the bench's layout (b))."""
    _due_rows(ScheduleFactory.create().pk, "'q' || g %% 10")
    explained, walk = _claim_plan("q0", limit=24)
    assert "Index Scan using django_jobs_occurrence_queue" in walk, explained
    assert {lease.queue for lease in claim("r1", NOW, limit=24, queue="q0")} == {"q0"}


# --- bad names are refused, naming the object and the field ----------------------------


def test_schedule_refuses_a_bad_queue_naming_the_field(registered) -> None:
    registered("q.report", lambda run: None)
    with override_settings(DJANGO_JOBS={"DEFAULTS": RECORD_DEFAULTS}):
        with pytest.raises(InvalidSchedule, match=r"schedule 'q.nightly': queue: must be 1-100"):
            schedule("q.nightly", job="q.report", timing=every(minutes=5), queue="no spaces")
        made = schedule(
            "q.nightly", job="q.report", timing=every(minutes=5), queue="reports", register=False
        )
    assert made.record_fields()["queue"] == "reports"


def test_job_refuses_a_bad_queue_naming_the_job_and_field() -> None:
    with pytest.raises(ConfigurationError, match=r"job 'q.bad': queue: must be 1-100"):
        job("q.bad", queue="x" * 101)(lambda run: None)
    assert "q.bad" not in registry.names()


def test_enqueue_puts_work_on_its_jobs_queue_or_the_one_given(registered) -> None:
    registered("q.mail", lambda run: None, policies=JobPolicies(queue="mail", owner="t"))
    clock = FakeClock(T0)
    with use_clock(clock):
        by_job = enqueue("q.mail")
        given = enqueue("q.mail", queue="urgent-mail")
        with pytest.raises(JobsError, match=r"enqueue of job 'q.mail': queue: must be 1-100"):
            enqueue("q.mail", queue="")
    assert Occurrence.objects.get(pk=by_job.id).queue == "mail"
    assert Occurrence.objects.get(pk=given.id).queue == "urgent-mail"


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["two words"], "--queue 'two words': the queue's name must be 1-100"),
        (["reports:0"], "--queue 'reports:0': the run threads after ':' must be"),
        (["reports:x"], "--queue 'reports:x': the run threads after ':' must be"),
        (["mail", "mail:2"], "--queue 'mail:2': queue 'mail' is named twice"),
    ],
)
def test_runworker_refuses_a_bad_queue_option(given: list[str], said: str) -> None:
    with pytest.raises(CommandError, match=said.replace("(", r"\(")):
        parse_queues(given, default=1)


def test_runworker_queue_threads_default_to_concurrency() -> None:
    assert parse_queues(["mail", "reports:2"], default=3) == [("mail", 3), ("reports", 2)]


@pytest.mark.parametrize(
    ("queues", "said"),
    [
        ({"bad name": {"MAX_RUNNING": 1}}, r"DJANGO_JOBS\['QUEUES'\]: queue name must be"),
        ({"reports": {"MAX_RUNNING": 0}}, r"\['reports'\]\['MAX_RUNNING'\] must be a whole"),
        ({"reports": {"MAX": 2}}, r"DJANGO_JOBS\['QUEUES'\]\['reports'\] must be"),
        (["reports"], r"DJANGO_JOBS\['QUEUES'\] must be a dict"),
    ],
)
def test_the_queues_setting_refuses_bad_limits_naming_them(queues: object, said: str) -> None:
    with (
        override_settings(DJANGO_JOBS={"QUEUES": queues}),
        pytest.raises(ConfigurationError, match=said),
    ):
        get_settings()


def test_the_queues_setting_gives_each_limit() -> None:
    with override_settings(DJANGO_JOBS={"QUEUES": {"reports": {"MAX_RUNNING": 2}}}):
        assert get_settings().max_running == {"reports": 2}
