"""The text, reason and draft rules, written once in ``django_jobs.validation``; their callers'
messages are asserted where those callers are tested."""

from __future__ import annotations

from datetime import date

import pytest

from django_jobs.exceptions import JobsError
from django_jobs.validation import (
    draft_gaps,
    draft_overdue,
    need_reason,
    printable,
    storable,
    text_problem,
)


def test_printable_allows_layout_only_where_asked() -> None:
    assert printable("two\tlines\nof prose")
    assert not printable("a\nname", layout=False)
    assert not printable("bell\x07")
    assert not printable("nul\x00")


def test_storable_refuses_only_nul() -> None:
    assert storable("bell\x07")
    assert not storable("nul\x00")


def test_text_problem_names_the_length_before_the_characters() -> None:
    assert text_problem("fine", 10) is None
    assert text_problem("x" * 11 + "\x00", 10) == "at most 10 characters, got 12"
    assert text_problem("x\x00", 10) == "must not contain NUL or other control characters"


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        (None, "disabling x: reason: say why (it is kept in the audit record)"),
        ("   ", "disabling x: reason: say why (it is kept in the audit record)"),
        ("r" * 2001, "disabling x: reason: at most 2000 characters, got 2001"),
        ("why\x00", "disabling x: reason: must not contain NUL or other control characters"),
    ],
)
def test_need_reason_refuses_what_an_audit_record_cannot_keep(reason, message) -> None:
    with pytest.raises(JobsError) as raised:
        need_reason(reason, "disabling x")
    assert str(raised.value) == message


def test_need_reason_keeps_the_reason_stripped() -> None:
    assert need_reason("  partner outage\n", "disabling x") == "partner outage"


def test_a_draft_names_a_decider_and_a_decide_by_date() -> None:
    assert draft_gaps("active", "", None) == []
    assert draft_gaps("draft", "cfo", date(2026, 3, 1)) == []
    assert draft_gaps("draft", " ", None) == [
        ("decider", "a draft must name a decider"),
        ("decide_by", "a draft must name a decide-by date"),
    ]


def test_a_draft_is_overdue_the_day_after_its_decide_by_date() -> None:
    assert not draft_overdue("draft", date(2026, 3, 1), date(2026, 3, 1))
    assert draft_overdue("draft", date(2026, 3, 1), date(2026, 3, 2))
    assert not draft_overdue("active", date(2026, 3, 1), date(2026, 3, 2))
