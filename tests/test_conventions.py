"""The dispatch rule and the conventions, checked: a handler calls an application command or
approved port (W024), lives in the app that owns its command (W026), schedules are declared
in schedules modules (W027), and each departure is an Exception record (I029, W022) that
``jobs departures`` lists."""

from __future__ import annotations

import datetime as dt
import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from django_jobs import every, schedule
from django_jobs.checks import check_conventions
from django_jobs.conf import get_settings
from django_jobs.conventions import Dispatch, report
from django_jobs.declarations import InvalidSchedule, declared
from django_jobs.exceptions import ConfigurationError
from django_jobs.registry import Departure, registry
from example_project.billing import jobs as billing_jobs
from example_project.billing import statements

COMMANDS = {"COMMANDS": ["example_project.billing.statements"]}
LATER = dt.date(2099, 1, 1)


def partner_gateway(key: str) -> None:
    """An approved port (named in APPROVED_PORTS by the tests that use it)."""


def counts_rows(run):
    return sum(range(10))  # calls nothing a project named


def dispatches_through_a_helper(run):
    _send(run)


def _send(run):
    statements.send_for(run.scheduled_at.date(), idempotency_key=run.occurrence_key, tenant="")


def imports_its_command_inside(run):
    from example_project.billing.statements import beat

    beat(run.scheduled_at, idempotency_key=run.occurrence_key)


def calls_the_port(run):
    partner_gateway(run.occurrence_key)


def ours(*ids: str) -> list[tuple[str | None, str]]:
    return [
        (m.id, m.msg)
        for m in check_conventions()
        if "tests.conv." in m.msg and (not ids or m.id in ids)
    ]


@override_settings(DJANGO_JOBS=COMMANDS)
def test_a_handler_that_calls_no_command_or_port_is_warned(registered) -> None:
    registered("tests.conv.counts", counts_rows)
    assert ours() == [
        (
            "django_jobs.W024",
            "Job 'tests.conv.counts' (tests.test_conventions) calls no application command or "
            "approved port.",
        )
    ]


@override_settings(DJANGO_JOBS=COMMANDS)
def test_the_example_handlers_dispatch_their_apps_commands() -> None:
    found = [m for m in check_conventions() if "billing." in m.msg]
    assert found == []
    settings = get_settings()
    assert report(billing_jobs.send_statements, settings).dispatches == [
        Dispatch("example_project.billing.statements.send_for", "command", "billing")
    ]
    assert report(billing_jobs.notify_accountant, settings).dispatches == [
        Dispatch("example_project.billing.statements.notify_accountant", "command", "billing")
    ]


@override_settings(DJANGO_JOBS=COMMANDS)
def test_a_dispatch_through_a_same_module_helper_or_a_local_import_counts() -> None:
    settings = get_settings()
    assert [d.path for d in report(dispatches_through_a_helper, settings).dispatches] == [
        "example_project.billing.statements.send_for"
    ]
    assert [d.path for d in report(imports_its_command_inside, settings).dispatches] == [
        "example_project.billing.statements.beat"
    ]


@override_settings(
    DJANGO_JOBS={**COMMANDS, "APPROVED_PORTS": ["tests.test_conventions.partner_gateway"]}
)
def test_an_approved_port_counts_as_a_dispatch(registered) -> None:
    registered("tests.conv.port", calls_the_port)
    assert ours() == []
    assert report(calls_the_port, get_settings()).dispatches == [
        Dispatch("tests.test_conventions.partner_gateway", "port", "")
    ]


@override_settings(DJANGO_JOBS=COMMANDS)
def test_a_handler_outside_its_commands_app_is_warned_unless_it_departs(registered) -> None:
    registered("tests.conv.misplaced", dispatches_through_a_helper)
    ((ident, msg),) = ours()
    assert ident == "django_jobs.W026"
    assert msg == (
        "Job 'tests.conv.misplaced' (tests.test_conventions) lives in app '(no app)' but "
        "dispatches commands of app 'billing': example_project.billing.statements.send_for."
    )
    registry.unregister("tests.conv.misplaced")
    departure = Departure(reason="shared reporting job", review_by=LATER, rule="placement")
    registered("tests.conv.misplaced", dispatches_through_a_helper, departure=departure)
    ((ident, msg),) = ours()
    assert ident == "django_jobs.I029"
    assert "living in the app that owns its command (W026) (rule 'placement')" in msg
    assert msg.endswith("until 2099-01-01: shared reporting job")


@override_settings(DJANGO_JOBS=COMMANDS)
def test_a_handler_departure_covers_dispatch_and_warns_again_past_its_review(registered) -> None:
    registered(
        "tests.conv.departed",
        counts_rows,
        departure=Departure(reason="a probe", review_by=dt.date(2020, 1, 1)),
    )
    ((ident, msg),) = ours()
    assert ident == "django_jobs.W022"
    assert "was due for review on 2020-01-01 (a probe)" in msg


@override_settings(DJANGO_JOBS={})
def test_without_commands_named_the_check_says_it_cannot_tell(registered) -> None:
    registered("tests.conv.counts", counts_rows)
    assert [m.id for m in check_conventions()].count("django_jobs.W028") == 1
    assert ours("django_jobs.W024") == []


# A complete declaration but for its key.
FIELDS: dict[str, Any] = dict(
    job="billing.heartbeat",
    timing=every(timedelta(minutes=5)),
    operating_owner="team",
    record_owner="ops@example.com",
    status="active",
    retention=timedelta(days=1),
)


def test_a_schedule_declared_outside_a_schedules_module_is_warned(monkeypatch) -> None:
    monkeypatch.setattr(declared, "_items", {})
    schedule("tests.conv.beside", **FIELDS)
    ((ident, msg),) = [(m.id, m.msg) for m in check_conventions() if "beside" in m.msg]
    assert ident == "django_jobs.W027"
    assert msg.startswith("Schedule 'tests.conv.beside' is declared in tests.test_conventions,")
    separation = Departure(reason="a one-file app", review_by=LATER, rule="separation")
    schedule("tests.conv.apart", departure=separation, **FIELDS)
    ((ident, msg),) = [(m.id, m.msg) for m in check_conventions() if "apart" in m.msg]
    assert ident == "django_jobs.I029"
    assert "being declared apart from behaviour" in msg


def test_departures_name_a_known_rule_in_the_right_place() -> None:
    with pytest.raises(ConfigurationError, match=r"Departure\.rule: one of handler, placement"):
        Departure(reason="x", review_by=LATER, rule="timing")
    with pytest.raises(ConfigurationError, match="recorded on its schedule, not its handler"):
        registry.register(
            "tests.conv.wrong",
            counts_rows,
            departure=Departure(reason="x", review_by=LATER, rule="separation"),
        )
    with pytest.raises(InvalidSchedule, match="departure: a schedule records a Departure"):
        schedule(
            "tests.conv.wrong",
            **FIELDS,
            register=False,
            departure=Departure(reason="x", review_by=LATER),
        )


def test_jobs_departures_lists_every_exception_record_due_first(registered) -> None:
    registered(
        "tests.conv.old",
        counts_rows,
        departure=Departure(reason="old probe", review_by=dt.date(2020, 1, 1)),
    )
    registered(
        "tests.conv.new",
        dispatches_through_a_helper,
        departure=Departure(reason="shared job", review_by=LATER, rule="placement"),
    )
    out = StringIO()
    call_command("jobs", "departures", "--json", stdout=out)
    rows = [r for r in json.loads(out.getvalue()) if "tests.conv." in r["subject"]]
    assert [(r["subject"], r["rule"], r["due"]) for r in rows] == [
        ("job tests.conv.old", "handler", True),
        ("job tests.conv.new", "placement", False),
    ]
    out = StringIO()
    call_command("jobs", "departures", stdout=out)
    assert "REVIEW DUE job tests.conv.old (tests.test_conventions): departs from handler" in (
        out.getvalue()
    )


@override_settings(DJANGO_JOBS=COMMANDS)
def test_jobs_handlers_says_what_each_handler_dispatches() -> None:
    out = StringIO()
    call_command("jobs", "handlers", stdout=out)
    assert (
        "billing.send_statements (example_project.billing.jobs, app billing): command "
        "example_project.billing.statements.send_for"
    ) in out.getvalue()
