"""#33 finding 2 under a real ``runworker``: the densest rule a timing accepts (an rrule once a
minute, 1,440 a day), with a year-long gap, is planned in passes of at most 1 s of the pass's
own CPU time (the replica's ``cpu_seconds``: a loaded machine stretches a pass's wall time, not
its work) while the replica's heartbeat gap stays under 3 s (``HEARTBEAT_SECONDS`` is 1 in
tests/worker_settings.py).

On 8f518d8 one decision counted a month of the gap (44,640 wall times of this rule) whatever
the pass's 0.5 s budget said; the budget was checked only between schedules.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User

from django_jobs import store
from django_jobs.models import AuditRecord, Occurrence, Schedule

from .catching_up import enable_and_catch_up
from .factories import ScheduleFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

SIXTY = ",".join(str(n) for n in range(60))
EVERY_MINUTE = f"FREQ=HOURLY;BYMINUTE={SIXTY}"
CALENDARS = {
    "plain": {},
    "weekends": {"holidays": [], "dates": [], "weekends": True},
}


@pytest.mark.parametrize("calendar", sorted(CALENDARS))
def test_a_year_long_gap_of_the_densest_rule_is_planned_in_short_passes_beside_heartbeats(
    start, calendar: str
) -> None:
    now = store.database_clock().replace(microsecond=0)
    root = User.objects.create_superuser("root", "root@example.com", "x")
    # An old schedule's row, disabled for a year: written with the ORM as an older release
    # left it, then enabled through the service layer, as an operator would.
    dense = ScheduleFactory.create(
        key="dense",
        job="proc.effect",
        timing_kind="rrule",
        rrule=EVERY_MINUTE,
        calendar=CALENDARS[calendar],
        cron="",
        interval=None,
        anchor=None,
        misfire="skip",
        max_delay=timedelta(minutes=5),
        created_at=now - timedelta(days=400),
        last_scheduled_at=now - timedelta(days=365),
        enabled=False,
        disabled_reason="a year off",
        next_due_at=None,
    )
    replica = start("r1")
    caught = enable_and_catch_up(replica, dense, actor=root)
    passes, longest, beats, gaps = caught.passes, caught.longest_cpu, caught.heartbeats, caught.gaps
    print(
        f"{calendar}: {len(passes)} plan passes, longest {longest:.3f} s CPU"
        f" ({caught.longest:.3f} s wall);"
        f" {len(beats)} heartbeats, longest gap {max(gaps).total_seconds():.3f} s"
    )
    assert any(e["more"] for e in passes)  # a year is more than one pass
    assert longest <= 1.0  # on 8f518d8: 1.3 s here (a month of the gap per decision)
    assert max(gaps) < timedelta(seconds=3)
    # Every instant of the year is accounted for: summarised, or a row of its own.
    summaries = AuditRecord.objects.filter(action="misfire.skipped", schedule_id=dense.pk)
    rows = Occurrence.objects.filter(schedule=dense).count()
    assert sum(r.after["count"] for r in summaries) + rows > 0
    assert Schedule.objects.get(pk=dense.pk).parked_field == ""
    assert replica.alive
