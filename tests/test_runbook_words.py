"""A schedule's replay runbook says the retry budget a replay gets (#37): the operator reads it
before replaying, not after the occurrence has gone dead again."""

from __future__ import annotations

import pytest

from django_jobs import runbooks
from django_jobs.models import RunbookKind

from .factories import ScheduleFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("max_attempts", "said"), [(5, "up to 5 attempts"), (1, "up to 1 attempt ")]
)
def test_the_replay_runbook_says_the_retry_budget_starts_afresh(max_attempts, said):
    schedule = ScheduleFactory.create(max_attempts=max_attempts)
    effect = runbooks.procedures(schedule)[RunbookKind.REPLAY]["claimed_occurrence_effect"]
    assert f"Its retry budget starts afresh: {said}" in effect
    runbooks.write(schedule)
    assert "before it is dead again" in runbooks.markdown(schedule)
