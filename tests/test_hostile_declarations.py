"""Hostile declarations: each is refused naming its field, or saved, read back and planned.

Property-based (hypothesis) over every argument of ``schedule(...)`` and its timings: random
cron text, zones (valid, invalid, unicode), intervals (zero, negative, huge), datetimes (naive,
year 1, year 9999, DST edges), keys and tenants (long, unicode, NUL, SQL-looking), policies.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_jobs import InvalidSchedule, Retry, after, at, cron, every, schedule
from django_jobs.declarations import local_time_gaps
from django_jobs.models import AuditRecord, Limit, Schedule
from django_jobs.registry import registry
from django_jobs.scheduling import timings
from django_jobs.services import upsert_schedule
from django_jobs.worker.planning import plan_due

from .factories import OWNERS, T0, declaration

pytestmark = pytest.mark.django_db

FIELDS = {
    "key",
    "tenant",
    "job",
    "timing",
    "timing.cron",
    "timing.zone",
    "timing.skipped",
    "timing.repeated",
    "timing.reason",
    "timing.interval",
    "timing.anchor",
    "timing.at",
    "timing.after",
    "operating_owner",
    "record_owner",
    "status",
    "decider",
    "decide_by",
    "max_delay",
    "timeout",
    "misfire",
    "overlap",
    "max_catchup",
    "retry",
    "retry.max_attempts",
    "retry.backoff",
    "retry.max_backoff",
    "retention",
}

HOSTILE_TEXT = [
    "",
    " ",
    "'; DROP TABLE django_jobs_schedule; --",
    'x" OR 1=1 --',
    "billing.nightly\n",
    "acme\x00",
    "\x00",
    "a" * 201,
    "b" * 10_000,
    "zürich",
    "🕐",
    "\u202etfel",
    "<script>alert(1)</script>",
    "../../etc/passwd",
]
text = st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(max_size=60))
keys = st.one_of(
    st.just("billing.nightly"), st.from_regex(r"[a-z][a-z0-9.:/_-]{0,30}", fullmatch=True), text
)
tenants = st.one_of(st.just(""), st.just("acme"), text)
zones = st.one_of(
    st.sampled_from(["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe"]),
    st.sampled_from(["Mars/Base", "localtime", "utc", "Factory", "", "Europe/../etc", "EST5EDT"]),
    st.text(max_size=30),
)
crons = st.one_of(
    st.sampled_from(
        [
            "0 9 * * *",
            "30 2 * * *",  # skipped on spring-forward days in many zones
            "30 1 * * *",  # repeated on fall-back days
            "*/15 * * * *",
            "0 0 29 2 *",
            "0 0 31 2 *",
            "@hourly",
            ",".join(str(m) for m in range(60))
            + " "
            + ",".join(str(h) for h in range(24))
            + " * * *",
            "61 * * * *",
            "* * * *",
            "0 9 * * * *",
            "'; DROP TABLE x; --",
        ]
    ),
    st.text(max_size=40),
)
deltas = st.one_of(
    st.sampled_from(
        [
            timedelta(0),
            timedelta(seconds=-1),
            timedelta(microseconds=1),
            timedelta.max,
            timedelta.min,
        ]
    ),
    st.sampled_from([timedelta(days=36525), timedelta(days=36526), timedelta(days=10**6)]),
    st.timedeltas(),
    st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(days=400)),
)
aware_zones = st.sampled_from([UTC, ZoneInfo("America/New_York"), ZoneInfo("Europe/London")])
instants = st.one_of(
    st.datetimes(timezones=aware_zones),  # years 1 to 9999
    st.datetimes(),  # naive
    st.sampled_from(
        [
            datetime(1, 1, 1, tzinfo=UTC),
            datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            datetime(2026, 3, 8, 2, 30, tzinfo=ZoneInfo("America/New_York")),  # does not exist
            datetime(2026, 11, 1, 1, 30, fold=1, tzinfo=ZoneInfo("America/New_York")),
        ]
    ),
)
timing_values = st.one_of(
    st.builds(
        cron,
        crons,
        zone=zones,
        skipped=st.sampled_from(["shift", "skip", "later", ""]),
        repeated=st.sampled_from(["first", "last", "both", "twice"]),
    ),
    st.builds(every, deltas, anchor=instants),
    st.builds(at, instants),
    st.builds(after, deltas),
    st.sampled_from(["0 9 * * *", None, 42]),
)
integers = st.one_of(st.integers(min_value=-10, max_value=10), st.integers(), st.just(True))
policies = st.one_of(st.sampled_from(["skip", "replay_once", "replay_all", "queue", "allow"]), text)


def declare(key: Any, **fields: Any) -> Any:
    base: dict[str, Any] = dict(
        job="billing.send_statements",
        timing=cron(
            "0 9 * * *", zone="America/New_York", skipped="shift", repeated="first", reason="r"
        ),
        retention=timedelta(days=90),
        status="active",
        register=False,
        **OWNERS,
    )
    return schedule(key, **{**base, **fields})


def counts() -> tuple[int, int, int]:
    return Schedule.objects.count(), Limit.objects.count(), AuditRecord.objects.count()


def operator() -> User:
    """The user the fuzzed upserts act as (one who may create and change any schedule)."""
    return User.objects.get_or_create(username="hypothesis", defaults={"is_superuser": True})[0]


def refused_at_run_time(d: Any) -> str | None:
    """The field a system check would refuse in this declaration (a local zone without its
    reason or DST choices, E018/E019; a job without a handler, E014): upsert_schedule
    refuses it too, since no check runs at run time."""
    gaps = local_time_gaps(d.timing)
    if gaps:
        return str(gaps[0][0])
    return None if d.job in registry.names() else "job"


def check(key: Any, **fields: Any) -> None:
    """Refused naming a field, with nothing written; or saved, read back, evaluated, planned."""
    before = counts()
    refused: InvalidSchedule | None = None
    try:
        d = declare(key, **fields)
        field = refused_at_run_time(d)
        if field:
            with pytest.raises(InvalidSchedule) as raised:
                upsert_schedule(d, actor=operator(), reason="fuzz", now=T0)
            refused = raised.value
            assert refused.field == field
    except InvalidSchedule as exc:
        refused = exc
    if refused is not None:
        assert refused.field in FIELDS, refused.field
        assert str(refused).startswith(f"schedule {key!r}: {refused.field}: ")
        assert counts() == before
        return
    with transaction.atomic():
        row = upsert_schedule(d, actor=operator(), reason="fuzz", now=T0)
        row.refresh_from_db()
        assert (row.tenant, row.key) == (d.tenant, d.key)
        expected = d.record_fields()
        if d.timing.kind == "after":  # "after" counts from the record's creation
            expected = {**expected, "run_at": T0 + d.timing.delay}
        assert {k: getattr(row, k) for k in expected} == expected
        # The planner evaluates what was saved without crashing, for the next 2 days.
        timings.from_record(row).between(T0, T0 + timedelta(days=2))
        result = plan_due(now=T0 + timedelta(hours=1))
        assert result.invalid == []
        transaction.set_rollback(True)


HYPOTHESIS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.mark.slow
@HYPOTHESIS
@given(key=keys, tenant=tenants)
def test_any_key_and_tenant(key: Any, tenant: Any) -> None:
    check(key, tenant=tenant)


@pytest.mark.slow
@HYPOTHESIS
@given(timing=timing_values)
def test_any_timing(timing: Any) -> None:
    check("billing.nightly", timing=timing)


@HYPOTHESIS
@given(
    max_delay=deltas,
    timeout=deltas,
    retention=st.one_of(deltas, integers),
    max_catchup=integers,
)
def test_any_durations_and_counts(
    max_delay: Any, timeout: Any, retention: Any, max_catchup: Any
) -> None:
    check(
        "billing.nightly",
        max_delay=max_delay,
        timeout=timeout,
        retention=retention,
        max_catchup=max_catchup,
    )


@HYPOTHESIS
@given(
    misfire=policies,
    overlap=policies,
    max_attempts=integers,
    backoff=deltas,
    max_backoff=deltas,
)
def test_any_policies(
    misfire: Any, overlap: Any, max_attempts: Any, backoff: Any, max_backoff: Any
) -> None:
    check(
        "billing.nightly",
        misfire=misfire,
        overlap=overlap,
        retry=Retry(max_attempts=max_attempts, backoff=backoff, max_backoff=max_backoff),
    )


@HYPOTHESIS
@given(
    # A registered job (saved) or any text (unregistered: refused naming job).
    job=st.one_of(st.just("billing.send_statements"), text),
    operating_owner=text,
    record_owner=text,
    decider=text,
    status=st.sampled_from(["draft", "active", "retired", "live"]),
)
def test_any_owners_job_and_status(
    job: Any, operating_owner: Any, record_owner: Any, decider: Any, status: str
) -> None:
    check(
        "billing.nightly",
        job=job,
        operating_owner=operating_owner,
        record_owner=record_owner,
        decider=decider,
        decide_by=T0.date(),
        status=status,
    )


# Regressions found by the properties above: each was accepted and then failed in PostgreSQL
# (a DataError, a 500 in an interface) or in the worker (an OverflowError).
@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"key": "billing.nightly\n"}, "key"),  # $ matched before a trailing newline
        ({"tenant": "acme\n"}, "tenant"),
        ({"job": "billing.\x00send"}, "job"),  # PostgreSQL refuses NUL in text
        ({"operating_owner": "team\x00"}, "operating_owner"),
        ({"decider": "cfo\x00", "status": "draft", "decide_by": T0.date()}, "decider"),
        ({"decider": "c" * 201, "status": "draft", "decide_by": T0.date()}, "decider"),
        ({"timeout": timedelta(days=10**6)}, "timeout"),  # deadline overflowed in the worker
        ({"max_delay": timedelta(days=10**6)}, "max_delay"),  # out of range in SQL
        ({"retention": timedelta(days=10**6)}, "retention"),  # purge out of range
        ({"retention": 2**40}, "retention"),  # beyond the integer column
        ({"retry": Retry(max_attempts=2**40)}, "retry.max_attempts"),
        ({"retry": Retry(max_backoff=timedelta(days=10**6))}, "retry.max_backoff"),
        ({"timing": every(timedelta(days=10**6))}, "timing.interval"),
        ({"timing": after(timedelta(days=10**6))}, "timing.after"),
        # A valid cron longer than the column.
        (
            {
                "timing": cron(
                    ",".join(str(m) for m in range(60))
                    + " "
                    + ",".join(str(h) for h in range(24))
                    + " 1,2,3,4,5,6,7,8,9,10 * *"
                )
            },
            "timing.cron",
        ),
    ],
)
def test_values_no_record_can_hold_are_refused_naming_the_field(fields: dict, field: str) -> None:
    key = fields.pop("key", "billing.nightly")
    with pytest.raises(InvalidSchedule) as refused:
        declare(key, **fields)
    assert refused.value.field == field
    assert not Schedule.objects.exists()


def test_a_sql_looking_key_is_refused_and_no_table_is_touched() -> None:
    before = counts()
    with pytest.raises(InvalidSchedule, match=r"key: must be 1-200 letters"):
        declaration(key="x'; DROP TABLE django_jobs_schedule; --")
    assert counts() == before


def test_an_interval_of_a_century_is_saved_and_planned_and_the_calendars_ends_refused() -> None:
    check("billing.nightly", timing=every(timedelta(days=36525)))
    # Year 1 and year 9999 are outside the window of instants (timing.check_instant).
    year_one = every(timedelta(days=36525), anchor=datetime(1, 1, 1, tzinfo=UTC))
    for timing, field in (
        (year_one, "timing.anchor"),
        (at(datetime(9999, 12, 31, 23, 59, tzinfo=UTC)), "timing.at"),
    ):
        with pytest.raises(InvalidSchedule) as refused:
            declare("billing.nightly", timing=timing)
        assert refused.value.field == field
