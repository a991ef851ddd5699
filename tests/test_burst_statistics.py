"""A burst planned ahead meets statements planned on the statistics of before it: the plan
pass refreshes the occurrence table's statistics once it planned a large share of the table
(``store.refresh_statistics``), and the wake-up lookups walk their due indexes in order
whatever the statistics say.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from django_jobs import store
from django_jobs.conf import get_settings
from django_jobs.models import Occurrence, Schedule
from django_jobs.registry import Registry
from django_jobs.store.replicas import QUERIES as WAKEUP_QUERIES
from django_jobs.worker.cadence import PlanCadence

from .factories import T0, ScheduleFactory
from .storeutil import planned

pytestmark = pytest.mark.django_db

OCCURRENCES = Occurrence._meta.db_table


def estimated_rows() -> float:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [OCCURRENCES])
        ((rows,),) = cursor.fetchall()
    return float(rows)


def analyzed_empty() -> None:
    """The statistics of before a burst: the occurrence table analyzed while empty."""
    assert not Occurrence.objects.exists()
    with connection.cursor() as cursor:
        cursor.execute(f'ANALYZE "{OCCURRENCES}"')
    assert estimated_rows() == 0


def cadence() -> PlanCadence:
    jobs = Registry()
    jobs.register("tests.noop", lambda run: None)
    return PlanCadence(replica_id="replica-a", settings=get_settings(), jobs=jobs)


def due_schedules(count: int) -> None:
    """``count`` one-a-minute schedules, each due at T0: one occurrence each to plan."""
    ScheduleFactory.create_batch(count, next_due_at=T0)


def plan_everything(planning: PlanCadence) -> None:
    """Plan passes until nothing is left due (a pass plans ``PLAN_BATCH_SIZE`` schedules)."""
    for _ in range(20):
        planning.plan(T0)
        if not Schedule.objects.filter(next_due_at__lte=T0).exists():
            return
    raise AssertionError("the passes never planned every due schedule")


def test_passes_that_planned_a_burst_refresh_the_occurrence_statistics_before_it_is_due() -> None:
    analyzed_empty()
    due_schedules(store.REFRESH_AT_LEAST)
    planning = cadence()
    plan_everything(planning)
    assert Occurrence.objects.count() == store.REFRESH_AT_LEAST
    # ANALYZE reads every page of a table this small: the estimate is the count.
    assert estimated_rows() == store.REFRESH_AT_LEAST
    assert planning.planned_unanalyzed == 0


def test_a_small_plan_leaves_the_statistics_to_autovacuum() -> None:
    analyzed_empty()
    due_schedules(300)
    planning = cadence()
    plan_everything(planning)
    assert Occurrence.objects.count() == 300
    assert estimated_rows() == 0
    assert planning.planned_unanalyzed == 300  # counted toward the next refresh


def test_planned_rows_under_a_tenth_of_the_estimated_table_refresh_nothing() -> None:
    schedule = ScheduleFactory.create()
    many = [T0 + timedelta(minutes=n) for n in range(10 * store.REFRESH_AT_LEAST + 1)]
    store.plan(planned(schedule, *many), now=T0)
    with connection.cursor() as cursor:
        cursor.execute(f'ANALYZE "{OCCURRENCES}"')
    assert estimated_rows() == len(many)
    assert store.refresh_statistics(planned=store.REFRESH_AT_LEAST) is False  # under a tenth
    Occurrence.objects.all().delete()  # the estimate still says 10,001
    assert estimated_rows() == len(many)
    assert store.refresh_statistics(planned=store.REFRESH_AT_LEAST + 1) is True  # a tenth
    assert estimated_rows() == 0
    assert store.refresh_statistics(planned=store.REFRESH_AT_LEAST - 1) is False  # too few


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += nodes(child)
    return found


def test_the_wakeup_reads_one_index_entry_of_the_schedules_however_many_have_nothing_due() -> None:
    """10,000 one-offs planned leave 10,000 NULL next due instants in the schedules' due
    index: a min() over it read every one of them (5-8 ms, at every idle step)."""
    ScheduleFactory.create_batch(2000, next_due_at=None)
    ScheduleFactory.create(next_due_at=T0 + timedelta(minutes=5))
    params: dict[str, Any] = {
        "excluded": [],
        "jobs": ["tests.noop"],
        "ahead": timedelta(seconds=30),
        "queues": None,  # a replica serving every queue
    }
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {WAKEUP_QUERIES['next_wakeup']}", params)
        ((explained,),) = cursor.fetchall()
    plan = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
    schedule_reads = [
        node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
        for node in nodes(plan)
        if node.get("Relation Name") == Schedule._meta.db_table
    ]
    assert schedule_reads
    assert max(schedule_reads) <= 1
    assert store.next_wakeup(
        now=T0, jobs=["tests.noop"], ahead=timedelta(seconds=30)
    ) == T0 + timedelta(minutes=4, seconds=30)
