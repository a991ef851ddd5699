"""A schedule record names its owners and status; a draft names a decider and a decide-by date."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from django_jobs.models import Schedule, ScheduleStatus
from django_jobs.scheduling.policies import TimingKind

from .factories import T0, ScheduleFactory

pytestmark = pytest.mark.django_db


def test_draft_without_decider_or_decide_by_is_refused_by_validation() -> None:
    draft = ScheduleFactory.build(key="billing.draft", status=ScheduleStatus.DRAFT)
    with pytest.raises(ValidationError) as raised:
        draft.full_clean()
    errors = raised.value.message_dict
    assert errors["decider"] == ["Schedule billing.draft: a draft must name a decider."]
    assert errors["decide_by"] == ["Schedule billing.draft: a draft must name a decide-by date."]


def test_a_draft_whose_decider_is_only_spaces_is_refused_as_declarations_refuse_it() -> None:
    """The model's validation uses the one draft rule (``validation.draft_gaps``), so the
    admin refuses what a declaration and the system checks refuse."""
    draft = ScheduleFactory.build(
        key="billing.draft", status=ScheduleStatus.DRAFT, decider="   ", decide_by=T0.date()
    )
    with pytest.raises(ValidationError) as raised:
        draft.full_clean()
    assert raised.value.message_dict == {
        "decider": ["Schedule billing.draft: a draft must name a decider."]
    }


@pytest.mark.parametrize(
    "fields",
    [{}, {"decider": "cfo"}, {"decide_by": T0.date()}],
    ids=["neither", "no-decide-by", "no-decider"],
)
def test_draft_without_decider_or_decide_by_is_refused_by_the_database(fields) -> None:
    with transaction.atomic(), pytest.raises(IntegrityError, match="django_jobs_draft_has_decider"):
        ScheduleFactory.create(status=ScheduleStatus.DRAFT, **fields)


def test_draft_with_decider_and_decide_by_is_accepted() -> None:
    draft = ScheduleFactory.create(status=ScheduleStatus.DRAFT, decider="cfo", decide_by=T0.date())
    draft.full_clean()
    assert Schedule.objects.get(pk=draft.pk).status == ScheduleStatus.DRAFT


def test_schedule_without_owners_is_refused_by_validation_and_database() -> None:
    orphan = ScheduleFactory.build(key="orphan", operating_owner="", record_owner="")
    with pytest.raises(ValidationError) as raised:
        orphan.full_clean()
    errors = raised.value.message_dict
    assert errors["operating_owner"] == errors["record_owner"] == ["This field cannot be blank."]
    with transaction.atomic(), pytest.raises(IntegrityError, match="schedule_has_owners"):
        orphan.save()


@pytest.mark.parametrize(
    "fields",
    [
        {"timing_kind": TimingKind.CRON, "cron": ""},
        {"timing_kind": TimingKind.INTERVAL, "interval": timedelta(0)},
        {"timing_kind": TimingKind.AT, "run_at": None},
    ],
    ids=["cron-without-expression", "zero-interval", "at-without-instant"],
)
def test_incomplete_timing_is_refused_by_the_database(fields) -> None:
    with transaction.atomic(), pytest.raises(IntegrityError, match="timing_complete"):
        ScheduleFactory.create(**fields)


def test_disabling_needs_a_reason() -> None:
    with transaction.atomic(), pytest.raises(IntegrityError, match="disabled_has_reason"):
        ScheduleFactory.create(enabled=False)


def test_key_is_unique_within_a_tenant_only() -> None:
    ScheduleFactory.create(tenant="acme", key="report")
    ScheduleFactory.create(tenant="globex", key="report")
    with transaction.atomic(), pytest.raises(IntegrityError, match="django_jobs_schedule_key"):
        ScheduleFactory.create(tenant="acme", key="report")
