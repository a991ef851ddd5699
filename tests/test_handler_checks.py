"""The system check that reads each handler's own source for what a job must not do itself."""

from __future__ import annotations

import datetime as dt

import pytest

from django_jobs.checks import check_job_handlers
from django_jobs.registry import Departure
from django_jobs.source_rules import http_calls, local_time_reads, storage_writes


def writes_directly(run):
    from example_project.billing.models import Statement

    Statement.objects.create(idempotency_key=run.occurrence_key, for_date=run.scheduled_at)


def calls_http(run):
    import urllib.request

    urllib.request.urlopen("https://example.com/api/statements")


def reads_local_time(run):
    return dt.datetime.now()  # noqa: DTZ005


async def writes_through_the_async_orm(run):
    from example_project.billing.models import Statement

    await Statement.objects.acreate(idempotency_key=run.occurrence_key, for_date=run.scheduled_at)


async def writes_through_sync_to_async(run):
    from asgiref.sync import sync_to_async

    from example_project.billing.models import Statement

    await sync_to_async(Statement.objects.create)(
        idempotency_key=run.occurrence_key, for_date=run.scheduled_at
    )


def ours():
    return [(m.id, m.msg) for m in check_job_handlers() if "tests.check." in m.msg]


def test_w020_a_handler_that_writes_models_directly(registered) -> None:
    registered("tests.check.writes", writes_directly)
    ((ident, msg),) = ours()
    assert ident == "django_jobs.W020"
    assert msg.startswith("Job 'tests.check.writes' (tests.test_handler_checks) does itself")
    assert "writes a model directly (.create())" in msg


def test_w020_a_handler_that_calls_http(registered) -> None:
    registered("tests.check.http", calls_http)
    ((ident, msg),) = ours()
    assert ident == "django_jobs.W020"
    assert "imports urllib.request" in msg
    assert "calls urllib.urlopen()" in msg


def test_w020_a_handler_that_reads_local_time(registered) -> None:
    registered("tests.check.clock", reads_local_time)
    ((ident, msg),) = ours()
    assert (ident, "naive datetime.now()" in msg) == ("django_jobs.W020", True)


def test_w020_an_async_handler_that_writes_through_the_async_orm(registered) -> None:
    registered("tests.check.async-orm", writes_through_the_async_orm)
    ((ident, msg),) = ours()
    assert ident == "django_jobs.W020"
    assert msg.startswith("Job 'tests.check.async-orm' (tests.test_handler_checks) does itself")
    assert "writes a model directly (.acreate())" in msg


def test_w020_an_async_handler_that_hands_a_model_write_to_sync_to_async(registered) -> None:
    registered("tests.check.async-s2a", writes_through_sync_to_async)
    ((ident, msg),) = ours()
    assert ident == "django_jobs.W020"
    assert "writes a model directly (.create()) through sync_to_async()" in msg


def test_i021_a_recorded_departure_is_reported_not_warned(registered) -> None:
    departure = Departure(
        reason="legacy export, moving to a command in Q1", review_by=dt.date(2099, 1, 1)
    )
    registered("tests.check.departed", writes_directly, departure=departure)
    ((ident, msg),) = ours()
    assert ident == "django_jobs.I021"
    assert msg.endswith(
        "under a recorded departure until 2099-01-01: legacy export, moving to a command in Q1"
    )


def test_w022_a_departure_past_its_review_date_warns_again(registered) -> None:
    departure = Departure(reason="legacy export", review_by=dt.date(2020, 1, 1))
    registered("tests.check.stale", writes_directly, departure=departure)
    ((ident, msg),) = ours()
    assert ident == "django_jobs.W022"
    assert "was due for review on 2020-01-01 (legacy export)" in msg


def test_the_example_and_test_handlers_dispatch_commands_and_pass() -> None:
    assert [m.id for m in check_job_handlers()] == []


def test_scanners_find_each_kind_and_pass_clean_code() -> None:
    clean = "def h(run):\n    with run.atomic():\n        statements.send_for(run.scheduled_at)\n"
    assert storage_writes(clean) == http_calls(clean) == local_time_reads(clean) == []
    assert [
        str(f) for f in storage_writes("x.save()\nconnection.cursor()\nM.objects.update(a=1)")
    ] == [
        "line 1: writes a model directly (.save())",
        "line 2: runs SQL directly (.cursor())",
        "line 3: writes a model directly (.update())",
    ]
    assert [
        str(f)
        for f in storage_writes("await s.asave()\nawait M.objects.abulk_create(r)\nM.acreate()")
    ] == [
        "line 1: writes a model directly (.asave())",
        "line 2: writes a model directly (.abulk_create())",
    ]
    assert [str(f) for f in http_calls("import httpx\nrequests.post(u)")] == [
        "line 1: imports httpx",
        "line 2: calls requests.post()",
    ]


def test_a_departure_needs_a_reason_and_a_review_date() -> None:
    from django_jobs.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"Departure\.reason"):
        Departure(reason=" ", review_by=dt.date(2099, 1, 1))
    with pytest.raises(ConfigurationError, match=r"Departure\.review_by"):
        Departure(reason="why", review_by="soon")  # type: ignore[arg-type]
