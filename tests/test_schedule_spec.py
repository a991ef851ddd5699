"""One spec for a schedule record (``django_jobs/spec.py``): each bad field is refused once,
with the same message, by every entry point that holds it: a declaration, a job's policies
(``@job``), the Tasks backend's ``OPTIONS``, the console's form, ``upsert_schedule``, the
planner's check of a stored row and the system checks. Each names the field of its own input.
"""

from __future__ import annotations

import dataclasses
import io
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.checks import ERROR, WARNING
from django.core.management import call_command

from django_jobs import Retry, registry, runbooks, services
from django_jobs.checks import check_declared_schedules, check_schedule_records
from django_jobs.console.forms import ScheduleForm
from django_jobs.declarations import InvalidSchedule, declared
from django_jobs.exceptions import ConfigurationError
from django_jobs.models import Limit, Schedule
from django_jobs.registry import JobPolicies, Registry
from django_jobs.scheduling import policies
from django_jobs.scheduling.policies import MAX_DURATION
from django_jobs.spec import MAX_ATTEMPTS, MAX_KEEP_LAST, RETRY_FIELDS, ScheduleSpec
from django_jobs.tasks import TaskOptions
from django_jobs.worker.planning import RefusedRow, check_row, plan_due

from .console_forms import form_data
from .factories import T0, ScheduleFactory, declaration

CENTURY_AND_A_DAY = MAX_DURATION + timedelta(days=1)


@dataclass(frozen=True)
class Case:
    """One bad value of one record column, as each entry point that holds it is given it
    (``None``: that entry point cannot be given it, or refuses it earlier by its own type)."""

    column: str  # the record's column (the spec's field, and the stored row's)
    value: Any
    message: str  # what the spec says, written out: a drifted message fails here
    declared: dict[str, Any] | None = None  # schedule(...) arguments
    declared_as: str = ""  # the field schedule(...) names (default: the column)
    job: dict[str, Any] | None = None  # @job(...) / JobPolicies arguments
    option: tuple[str, Any] | None = None  # a Tasks OPTIONS key and its value
    row: dict[str, Any] = field(default_factory=dict)  # stored Schedule columns
    limit: dict[str, Any] | None = None  # stored Limit columns
    planned: bool = False  # the planner plans with it: check_row refuses it
    form: dict[str, str] | None = None  # the console form's fields
    form_field: str = ""  # the form field the refusal is shown on (default: the column)


CASES = {
    "max_catchup over the planner's cap": Case(
        "max_catchup",
        20_000,
        "must be a whole number from 0 to 10000, got 20000",
        declared={"max_catchup": 20_000},
        row={"max_catchup": 20_000},
        planned=True,
        form={"max_catchup": "20000"},
    ),
    "max_delay of zero": Case(
        "max_delay",
        timedelta(0),
        "must be a positive timedelta of at most 36525 days, got datetime.timedelta(0)",
        declared={"max_delay": timedelta(0)},
        job={"max_delay": timedelta(0)},
        option=("MAX_DELAY_SECONDS", 0),
        row={"max_delay": timedelta(0)},
        planned=True,
        form={"max_delay": "00:00:00"},
    ),
    "max_delay over a century": Case(
        "max_delay",
        CENTURY_AND_A_DAY,
        "must be a positive timedelta of at most 36525 days, got datetime.timedelta(days=36526)",
        declared={"max_delay": CENTURY_AND_A_DAY},
        job={"max_delay": CENTURY_AND_A_DAY},
        option=("MAX_DELAY_SECONDS", CENTURY_AND_A_DAY.total_seconds()),
        row={"max_delay": CENTURY_AND_A_DAY},
        planned=True,
        form={"max_delay": "36526 00:00:00"},
    ),
    "an unknown misfire policy": Case(
        "misfire",
        "retry_forever",
        "must be one of skip, replay_once, replay_all, got 'retry_forever'",
        declared={"misfire": "retry_forever"},
        row={"misfire": "retry_forever"},
        planned=True,
    ),
    "timeout over a century": Case(
        "timeout",
        CENTURY_AND_A_DAY,
        "must be a positive timedelta of at most 36525 days, got datetime.timedelta(days=36526)",
        declared={"timeout": CENTURY_AND_A_DAY},
        job={"timeout": CENTURY_AND_A_DAY},
        option=("TIMEOUT_SECONDS", CENTURY_AND_A_DAY.total_seconds()),
        row={"timeout": CENTURY_AND_A_DAY},
        form={"timeout": "36526 00:00:00"},
    ),
    "attempts over the retry budget": Case(
        "max_attempts",
        MAX_ATTEMPTS + 1,
        "must be a whole number from 1 to 10000, got 10001",
        declared={"retry": Retry(max_attempts=MAX_ATTEMPTS + 1)},
        declared_as="retry.max_attempts",
        job={"retry": Retry(max_attempts=MAX_ATTEMPTS + 1)},
        option=("MAX_ATTEMPTS", MAX_ATTEMPTS + 1),
        row={"max_attempts": MAX_ATTEMPTS + 1},
        form={"max_attempts": str(MAX_ATTEMPTS + 1)},
    ),
    "keep_last over its bound": Case(
        "keep_last",
        MAX_KEEP_LAST + 1,
        "must be a positive timedelta (keep for, at most 36525 days) or a positive count "
        "(keep last, at most 100000000), got 100000001",
        declared={"retention": MAX_KEEP_LAST + 1},
        declared_as="retention",
        job={"retention": MAX_KEEP_LAST + 1},
        limit={"keep_last": MAX_KEEP_LAST + 1},
        form={"keep_for": "", "keep_last": str(MAX_KEEP_LAST + 1)},
        form_field="keep_for",
    ),
    "keep_for over a century": Case(
        "keep_for",
        CENTURY_AND_A_DAY,
        "must be a positive timedelta (keep for, at most 36525 days) or a positive count "
        "(keep last, at most 100000000), got datetime.timedelta(days=36526)",
        declared={"retention": CENTURY_AND_A_DAY},
        declared_as="retention",
        job={"retention": CENTURY_AND_A_DAY},
        option=("RETENTION_DAYS", CENTURY_AND_A_DAY.days),
        limit={"keep_for": CENTURY_AND_A_DAY},
        form={"keep_for": "36526 00:00:00"},
    ),
    "priority out of range": Case(
        "priority",
        101,
        "must be from -100 to 100, got 101",
        declared={"priority": 101},
        job={"priority": 101},
    ),
}


def spec_says(case: Case) -> tuple[str, str]:
    (problem,) = ScheduleSpec(**{case.column: case.value}).problems()
    return problem


@pytest.mark.parametrize("name", list(CASES))
def test_the_spec_refuses_each_bad_field_once_with_its_message(name: str) -> None:
    case = CASES[name]
    reported = "retention" if case.column in ("keep_for", "keep_last") else case.column
    assert spec_says(case) == (reported, case.message)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.declared is not None])
def test_a_declaration_is_refused_with_the_specs_message(name: str) -> None:
    case = CASES[name]
    with pytest.raises(InvalidSchedule) as refused:
        declaration(**(case.declared or {}))
    field_name = case.declared_as or case.column
    assert (refused.value.field, refused.value.detail) == (field_name, case.message)
    assert str(refused.value) == f"schedule 'billing.nightly': {field_name}: {case.message}"


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.job is not None])
def test_a_jobs_policies_are_refused_with_the_specs_message(name: str) -> None:
    case = CASES[name]
    field_name = case.declared_as or case.column
    assert JobPolicies(**(case.job or {})).problems() == [(field_name, case.message)]
    with pytest.raises(ConfigurationError) as refused:
        Registry().register("t.x", lambda run: None, policies=JobPolicies(**(case.job or {})))
    assert str(refused.value) == f"job 't.x': {field_name}: {case.message}"


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.option is not None])
def test_the_tasks_options_are_refused_with_the_specs_message(name: str) -> None:
    case = CASES[name]
    key, value = case.option or ("", None)
    with pytest.raises(ConfigurationError) as refused:
        TaskOptions.parse("fast", {key: value})
    assert str(refused.value) == f"TASKS['fast']['OPTIONS'][{key!r}]: {case.message}"


def stored(case: Case, key: str) -> Schedule:
    """A row of ``case``'s bad column, with its Limit and runbooks (as a sync writes them),
    read back from the database."""
    row = ScheduleFactory.create(key=key, job="billing.heartbeat", created_at=T0, **case.row)
    Limit.objects.create(schedule=row, **(case.limit or {"keep_for": timedelta(days=7)}))
    runbooks.write(row)
    return Schedule.objects.select_related("limit").get(pk=row.pk)


@pytest.mark.django_db
@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.row or c.limit])
def test_a_stored_row_is_reported_by_the_system_check_with_the_specs_message(name: str) -> None:
    case = CASES[name]
    stored(case, "hand-written")
    reported = "retention" if case.limit else case.column
    assert [(m.id, m.level, m.msg) for m in check_schedule_records(databases=["default"])] == [
        ("django_jobs.W032", WARNING, f"Schedule 'hand-written': {reported}: {case.message}.")
    ]


@pytest.mark.django_db
def test_a_stored_row_the_spec_refuses_does_not_stop_migrate_or_check() -> None:
    """``migrate`` runs the database checks: a row an older release planned (a delay of 0)
    is a warning there (W032), never a SystemCheckError; the planner parks it."""
    stored(CASES["max_delay of zero"], "old-release")
    call_command("check", "--database", "default", stdout=io.StringIO(), stderr=io.StringIO())
    call_command("migrate", verbosity=0, stdout=io.StringIO())


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.declared is not None])
def test_a_declaration_the_spec_refuses_is_an_error(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A declaration built without ``schedule()`` (a public dataclass) is checked as one: its
    bad field is an Error (E032), named as ``schedule(...)`` names it (``retry.max_attempts``,
    ``retention``), where a stored row's is named by its column (W032)."""
    case = CASES[name]
    monkeypatch.setattr(declared, "_items", {})
    good = declaration(key="acme.report", job="billing.heartbeat")
    declared.add(dataclasses.replace(good, **(case.declared or {})))
    field_name = case.declared_as or case.column
    assert [(m.id, m.level, m.msg) for m in check_declared_schedules() if m.level >= ERROR] == [
        ("django_jobs.E032", ERROR, f"Schedule 'acme.report': {field_name}: {case.message}.")
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.planned])
def test_the_planner_refuses_a_stored_row_with_the_specs_message(name: str) -> None:
    case = CASES[name]
    row = stored(case, "hand-written")
    with pytest.raises(RefusedRow) as refused:
        check_row(row, now=T0)
    assert (refused.value.field, str(refused.value)) == (
        case.column,
        f"{case.column}: {case.message}",
    )


@pytest.mark.django_db
def test_a_row_with_a_max_delay_of_zero_is_parked_as_a_declaration_is_refused() -> None:
    """Declarations always refused a delay of 0; the planner now keeps the same rule."""
    row = stored(CASES["max_delay of zero"], "no-delay")
    Schedule.objects.filter(pk=row.pk).update(next_due_at=T0)
    result = plan_due(now=T0 + timedelta(minutes=1))
    assert result.invalid == ["no-delay"]
    row.refresh_from_db()
    assert (row.next_due_at, row.parked_field) == (None, "max_delay")
    assert CASES["max_delay of zero"].message in row.parked_reason


@pytest.mark.django_db
@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.form is not None])
def test_the_console_form_shows_the_specs_message_on_its_field(name: str) -> None:
    case = CASES[name]
    form = ScheduleForm(data=form_data(**(case.form or {})))
    assert not form.is_valid()
    field_name = case.declared_as or case.column
    shown_on = case.form_field or case.column
    assert form.errors == {shown_on: [f"schedule 'acme.report': {field_name}: {case.message}"]}


@pytest.mark.django_db
def test_upsert_schedule_refuses_a_declaration_built_without_schedule() -> None:
    """A ``Declaration`` is a public dataclass: one built directly is checked by the spec
    before it is written, as ``schedule()`` would have."""
    good = declaration(key="acme.report", job="billing.send_statements", tenant="acme")
    bad = dataclasses.replace(good, max_catchup=20_000)  # no validation: a plain dataclass
    message = CASES["max_catchup over the planner's cap"].message
    root = User.objects.create_superuser("root", "r@example.com", "pw")
    with pytest.raises(InvalidSchedule) as refused:
        services.upsert_schedule(bad, actor=root, reason="hand-built", now=T0)
    assert str(refused.value) == f"schedule 'acme/acme.report': max_catchup: {message}"
    assert not Schedule.objects.filter(key="acme.report").exists()


@pytest.mark.parametrize(
    "retry",
    [
        Retry(),
        Retry(max_attempts=0),
        Retry(max_attempts=MAX_ATTEMPTS + 1, backoff=timedelta(-1)),
        Retry(max_attempts=True, max_backoff=CENTURY_AND_A_DAY),
        Retry(backoff="30s"),  # type: ignore[arg-type]
    ],
)
def test_the_public_retry_says_the_specs_problems_of_its_fields(retry: Retry) -> None:
    """``django_jobs.Retry(...).problems()`` is public: (field, message) named as
    ``schedule(...)`` takes it, the spec's message for that column."""
    says = [(RETRY_FIELDS[f], m) for f, m in ScheduleSpec.of(retry=retry).problems()]
    assert retry.problems() == says
    assert bool(says) == (retry != Retry())


def test_the_bounds_are_importable_where_they_were_defined_once() -> None:
    assert policies.MAX_ATTEMPTS is MAX_ATTEMPTS == 10_000
    assert registry.MAX_KEEP_LAST is MAX_KEEP_LAST == 100_000_000
