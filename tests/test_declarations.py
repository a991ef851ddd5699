"""Declaring schedules: every field validated, errors naming the schedule and the field."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_jobs import InvalidSchedule, Misfire, Overlap, Retry, after, at, cron, every, schedule
from django_jobs.declarations import Declared

from .factories import OWNERS, declaration


def declare(**fields):
    return declaration(**fields)


def attempt(**fields) -> tuple[Any, InvalidSchedule | None]:
    """Declare, returning the declaration or the refusal."""
    try:
        return declare(**fields), None
    except InvalidSchedule as exc:
        return None, exc


def test_a_complete_declaration_names_every_field_of_the_record() -> None:
    d = declare(
        max_delay=timedelta(minutes=30),
        misfire=Misfire.REPLAY_ONCE,
        overlap="queue",
        retry=Retry(
            max_attempts=5, backoff=timedelta(seconds=30), max_backoff=timedelta(minutes=10)
        ),
        timeout=timedelta(minutes=15),
    )
    fields = d.record_fields()
    assert fields["time_zone"] == "America/New_York"
    assert (fields["skipped_time"], fields["repeated_time"]) == ("shift", "first")
    assert (fields["misfire"], fields["overlap"]) == ("replay_once", "queue")
    assert (fields["max_attempts"], fields["timeout"]) == (5, timedelta(minutes=15))
    assert d.limit_fields() == {"keep_for": timedelta(days=90), "keep_last": None}


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"timing": cron("61 * * * *")}, "timing.cron", "is not a valid cron expression"),
        ({"timing": cron("0 9 * *")}, "timing.cron", "is not a five-field cron expression"),
        ({"timing": cron("0 0 31 2 *")}, "timing.cron", "never matches a date"),
        ({"timing": cron("0 9 * * *", zone="Mars/Base")}, "timing.zone", "not an IANA"),
        ({"timing": cron("0 9 * * *", zone="localtime")}, "timing.zone", "not an IANA"),
        ({"timing": cron("0 9 * * *", skipped="later")}, "timing.skipped", "must be one of"),
        ({"timing": cron("0 9 * * *", repeated="twice")}, "timing.repeated", "must be one of"),
        ({"timing": every(timedelta(0))}, "timing.interval", "positive timedelta"),
        ({"timing": every(timedelta(seconds=-5))}, "timing.interval", "positive timedelta"),
        ({"timing": at(datetime(2026, 1, 1, 9))}, "timing.at", "must be an aware datetime"),  # noqa: DTZ001
        ({"timing": after(timedelta(hours=-1))}, "timing.after", "0 or more"),
        ({"timing": "0 9 * * *"}, "timing", "must be cron(...)"),
        ({"misfire": "retry_forever"}, "misfire", "must be one of skip, replay_once"),
        ({"overlap": "sometimes"}, "overlap", "must be one of skip, queue, allow"),
        ({"operating_owner": ""}, "operating_owner", "is required"),
        ({"record_owner": "  "}, "record_owner", "is required"),
        ({"status": "live"}, "status", "must be one of draft, active, retired"),
        ({"status": "draft"}, "decider", "a draft must name a decider"),
        ({"status": "draft", "decider": "cfo"}, "decide_by", "a draft must name a decide-by"),
        ({"max_delay": timedelta(0)}, "max_delay", "positive timedelta"),
        ({"timeout": 30}, "timeout", "positive timedelta"),
        ({"retry": Retry(max_attempts=0)}, "retry.max_attempts", "from 1 to 10000, got 0"),
        ({"retry": Retry(backoff=timedelta(seconds=-1))}, "retry.backoff", "0 or more"),
        ({"retention": 0}, "retention", "must be a positive timedelta"),
        ({"max_catchup": -1}, "max_catchup", "from 0 to 10000"),
        ({"job": ""}, "job", "must name a registered @job"),
        ({"tenant": "acme corp"}, "tenant", "letters, digits"),
    ],
)
def test_bad_input_names_the_schedule_and_the_field(fields, field, message) -> None:
    with pytest.raises(InvalidSchedule) as raised:
        declare(**fields)
    assert raised.value.field == field
    assert str(raised.value).startswith(f"schedule 'billing.nightly': {field}: ")
    assert message in str(raised.value)


def test_a_bad_duration_is_refused_showing_its_own_value() -> None:
    # The messages are formatted only for a rule that fails: each shows its own field's value.
    with pytest.raises(InvalidSchedule, match=r"max_delay: .* got datetime.timedelta\(0\)$"):
        declare(max_delay=timedelta(0), timeout=timedelta(minutes=5))
    with pytest.raises(InvalidSchedule, match=r"timeout: .* got 30$"):
        declare(max_delay=timedelta(minutes=5), timeout=30)


def test_a_bad_key_is_refused_naming_the_key() -> None:
    with pytest.raises(InvalidSchedule, match=r"schedule \"x'; DROP TABLE\": key: "):
        schedule(
            "x'; DROP TABLE",
            job="j",
            timing=every(timedelta(minutes=1)),
            status="active",
            retention=10,
            register=False,
            **OWNERS,
        )


def test_a_draft_with_decider_and_decide_by_is_accepted() -> None:
    d = declare(status="draft", decider="cfo", decide_by=date(2026, 12, 31))
    assert (d.status, d.decider) == ("draft", "cfo")


def test_declaring_the_same_key_twice_differently_is_refused() -> None:
    registry = Declared()
    registry.add(declare())
    registry.add(declare())  # the same declaration again (a module imported twice) is fine
    with pytest.raises(InvalidSchedule, match="declared twice"):
        registry.add(declare(timeout=timedelta(minutes=1)))


def test_timings_report_their_next_runs() -> None:
    start = datetime(2026, 3, 1, tzinfo=UTC)
    assert every(timedelta(hours=12)).between(start, start + timedelta(days=1)) == [
        start,
        start + timedelta(hours=12),
    ]
    assert at(start).between(start, start + timedelta(seconds=1)) == [start]
    assert after(timedelta(hours=2)).created(start).between(start, start + timedelta(days=1)) == [
        start + timedelta(hours=2)
    ]


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=40))
def test_any_cron_text_is_accepted_or_refused_naming_the_field(text: str) -> None:
    declaration, refused = attempt(timing=cron(text))
    if refused is not None:
        assert refused.field == "timing.cron"
        assert str(refused).startswith("schedule 'billing.nightly': timing.cron: ")
    else:
        assert declaration is not None
        start = datetime(2026, 1, 1, tzinfo=UTC)
        instants = declaration.timing.between(start, start + timedelta(days=2))
        assert instants == sorted(set(instants))


@settings(max_examples=200, deadline=None)
@given(zone=st.text(max_size=30))
def test_any_zone_text_is_accepted_or_refused_naming_the_field(zone: str) -> None:
    declaration, refused = attempt(timing=cron("0 9 * * *", zone=zone))
    if refused is not None:
        assert refused.field == "timing.zone"
    else:
        assert declaration is not None
        assert declaration.record_fields()["time_zone"] == zone


def test_policies_are_documented_enums() -> None:
    assert [m.value for m in Misfire] == ["skip", "replay_once", "replay_all"]
    assert [m.value for m in Overlap] == ["skip", "queue", "allow"]
