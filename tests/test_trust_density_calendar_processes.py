"""#33 finding 2 under a real ``runworker``, with a calendar that moves occurrences: the densest
rule (one a minute) with a week of excluded days moved to the next day, and a year-long gap,
is planned in passes of at most 1 s of the pass's own CPU time (the replica's ``cpu_seconds``:
a loaded machine stretches a pass's wall time, not its work) while the replica's heartbeat gap
stays under 3 s (``HEARTBEAT_SECONDS`` is 1 in tests/worker_settings.py); a row holding the
review's timing (365 excluded days in a row, moved) is parked naming ``timing.exclude`` beside
it.

On 8f518d8, and after a567a28, the review's row made one decision walk the whole run of
excluded days for every day it counted: one plan decision took 23.5-219.6 s, and a real
replica wrote no heartbeat for 60 s.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import User

from django_jobs import store
from django_jobs.models import Schedule

from .catching_up import enable_and_catch_up
from .factories import ScheduleFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

SIXTY = ",".join(str(n) for n in range(60))
EVERY_MINUTE = f"FREQ=HOURLY;BYMINUTE={SIXTY}"


def _dates(first: datetime, days: int) -> dict[str, object]:
    dates = [(first.date() + timedelta(days=i)).isoformat() for i in range(days)]
    return {"holidays": [], "weekends": False, "dates": dates}


def _dense(key: str, now: datetime, calendar: dict[str, object], **fields: object) -> Schedule:
    return ScheduleFactory.create(
        key=key,
        job="proc.effect",
        timing_kind="rrule",
        rrule=EVERY_MINUTE,
        calendar=calendar,
        on_excluded="next",
        cron="",
        interval=None,
        anchor=None,
        misfire="skip",
        max_delay=timedelta(minutes=5),
        created_at=now - timedelta(days=400),
        **fields,
    )


def test_a_moved_calendar_of_the_densest_rule_is_planned_in_short_passes_beside_heartbeats(
    start,
) -> None:
    now = store.database_clock().replace(microsecond=0)
    root = User.objects.create_superuser("root", "root@example.com", "x")
    # The longest run the densest rule may move (a week), twice inside the gap.
    week = _dates(now - timedelta(days=200), 7)
    week["dates"] += _dates(now - timedelta(days=20), 7)["dates"]  # type: ignore[operator]
    dense = _dense(
        "dense",
        now,
        week,
        last_scheduled_at=now - timedelta(days=365),
        enabled=False,
        disabled_reason="a year off",
        next_due_at=None,
    )
    # The review's timing, written behind the service layer: refused when read.
    review = _dense(
        "review",
        now,
        _dates(now - timedelta(days=300), 365),
        last_scheduled_at=now - timedelta(days=2),
        next_due_at=now,
    )
    replica = start("r1")
    caught = enable_and_catch_up(replica, dense, actor=root)
    passes, longest, beats, gaps = caught.passes, caught.longest_cpu, caught.heartbeats, caught.gaps
    print(
        f"{len(passes)} plan passes, longest {longest:.3f} s CPU ({caught.longest:.3f} s wall);"
        f" {len(beats)} heartbeats, longest gap {max(gaps).total_seconds():.3f} s"
    )
    assert any(e["more"] for e in passes)  # a year is more than one pass
    assert longest <= 1.0  # the pass's budget is 0.5 s: it stops deciding then
    assert max(gaps) < timedelta(seconds=3)
    assert Schedule.objects.get(pk=dense.pk).parked_field == ""
    review.refresh_from_db()
    assert review.parked_field == "timing.exclude"
    assert "365 consecutive excluded days" in review.parked_reason
    assert replica.alive
