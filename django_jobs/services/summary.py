"""A schedule as its admin page summarises it: the timing in words (in its zone and in UTC),
its next runs with DST transitions marked, its policies in one block, who answers for it, and
its recent occurrences with their lateness and duration.

Read-only and permission-checked like ``inspect_schedule``: the row is read by its primary
key, then ``view`` is required on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import OuterRef, Subquery

from .. import permissions, words
from ..clock import ensure_aware_utc
from ..conf import get_settings
from ..models import Attempt, Limit, Occurrence, Schedule, ScheduleStatus
from ..safe_error import shown_json
from ..scheduling import timing_words, timings, upcoming
from ..scheduling.policies import Misfire, Overlap, TimingKind
from .inspection import with_recovery_points
from .rows import schedule_row

# The newest occurrences the summary lists; the rest are in the occurrence list.
RECENT = 20

_MISFIRE = {
    Misfire.SKIP: "skip: every missed occurrence is recorded as skipped, none runs",
    Misfire.REPLAY_ONCE: "replay once: the most recent missed occurrence runs, the others are "
    "recorded as skipped",
    Misfire.REPLAY_ALL: "replay all: the most recent missed occurrences (up to max catch-up) "
    "run oldest first",
}
_OVERLAP = {
    Overlap.SKIP: "skip: an occurrence due while the previous one runs is recorded as skipped",
    Overlap.QUEUE: "queue: it waits until the previous one has ended",
    Overlap.ALLOW: "allow: it runs alongside",
}


@dataclass(frozen=True)
class RecentOccurrence:
    """An occurrence with how late it started (its first attempt's start less its scheduled
    instant: a retry's backoff is not lateness) and how long its latest attempt ran
    (``finished_at - started_at``); None where it has not started or finished."""

    occurrence: Occurrence
    lateness: timedelta | None
    duration: timedelta | None

    @property
    def scheduled_words(self) -> str:
        """Its scheduled instant in UTC (the page never shows Django's ``TIME_ZONE``)."""
        return f"{upcoming.instant_words(self.occurrence.scheduled_at.astimezone(UTC))} UTC"

    @property
    def lateness_words(self) -> str:
        return seconds_words(self.lateness)

    @property
    def duration_words(self) -> str:
        return seconds_words(self.duration)


@dataclass(frozen=True)
class ScheduleSummary:
    """What the schedule page shows above the record's fields. ``words`` is None (and
    ``problem`` says why) for a timing the planner cannot evaluate (it parks it)."""

    schedule: Schedule
    now: datetime
    words: timing_words.TimingWords | None
    problem: str
    next_runs: list[upcoming.UpcomingRun]
    policies: list[tuple[str, str]]
    people: list[tuple[str, str]]
    state: list[tuple[str, str]]
    recent: list[RecentOccurrence]
    arguments: str
    last_started_at: datetime | None
    last_completed_at: datetime | None

    @property
    def zoned(self) -> bool:
        """Whether its runs are shown in a zone other than UTC."""
        return timings.is_local(self.schedule)


def schedule_summary(schedule: Schedule, *, actor: Any, now: datetime) -> ScheduleSummary:
    """The summary of the schedule row ``schedule``'s primary key names, as of ``now``;
    ``permissions.Forbidden`` unless ``actor`` may view it."""
    now = ensure_aware_utc(now, name="now")
    schedule = schedule_row(schedule, lock=False)
    permissions.require(actor, "view", schedule)
    words, runs, problem = _timing(schedule, now)
    started, completed = (
        with_recovery_points(Schedule.objects.filter(pk=schedule.pk))
        .values_list("last_started_at", "last_completed_at")
        .get()
    )
    return ScheduleSummary(
        schedule=schedule,
        now=now,
        words=words,
        problem=problem,
        next_runs=runs,
        policies=policies(schedule),
        people=_people(schedule),
        state=[
            *_state(schedule),
            ("last scheduled", _utc(schedule.last_scheduled_at)),
            ("last started", _utc(started)),
            ("last completed", _utc(completed)),
        ],
        recent=recent_occurrences(schedule),
        arguments=shown_json(schedule.args, get_settings().REDACT_PATTERNS),
        last_started_at=started,
        last_completed_at=completed,
    )


def _timing(
    schedule: Schedule, now: datetime
) -> tuple[timing_words.TimingWords | None, list[upcoming.UpcomingRun], str]:
    if schedule.timing_kind == TimingKind.ENQUEUED:
        words = timing_words.TimingWords(
            "never planned: the policy record of the job's enqueued work (enqueue())", ""
        )
        return words, [], ""
    try:
        timing = timings.from_record(schedule)
        return (
            timing_words.describe(timing, now=now),
            upcoming.next_runs(timing, now=now),
            "",
        )
    except (ValueError, OverflowError) as exc:  # parked by the planner (check E030)
        return None, [], f"cannot be evaluated: {exc}"


def misfire_words(schedule: Schedule) -> str:
    """Its misfire policy in words (``skip: every missed occurrence is recorded as ...``)."""
    return _MISFIRE[Misfire(schedule.misfire)]


def policies(schedule: Schedule) -> list[tuple[str, str]]:
    """Each policy of the record, named, in words."""
    duration = timing_words.duration
    return [
        ("misfire", misfire_words(schedule)),
        ("late after (max delay)", duration(schedule.max_delay)),
        ("max catch-up", f"{schedule.max_catchup} occurrences"),
        ("overlap", _OVERLAP[Overlap(schedule.overlap)]),
        (
            "retry",
            f"up to {schedule.max_attempts} attempt{'s' if schedule.max_attempts != 1 else ''}, "
            f"backoff {duration(schedule.backoff)} doubling to at most "
            f"{duration(schedule.max_backoff)}, then dead letter",
        ),
        ("timeout", duration(schedule.timeout)),
        ("retention", _retention(schedule)),
        ("priority", str(schedule.priority)),
        ("idempotency scope", schedule.get_idempotency_scope_display()),
    ]


def _retention(schedule: Schedule) -> str:
    limit = Limit.objects.filter(schedule=schedule).first()
    if limit is None:
        return "no limit recorded: finished occurrences are kept"
    kept = []
    if limit.keep_for is not None:
        kept.append(f"for {timing_words.duration(limit.keep_for)}")
    if limit.keep_last is not None:
        kept.append(f"the last {limit.keep_last}")
    return "finished occurrences kept " + " or ".join(kept)


def _people(schedule: Schedule) -> list[tuple[str, str]]:
    rows = [
        ("operating owner", schedule.operating_owner),
        ("record owner", schedule.record_owner),
        ("status", schedule.status),
        ("origin", schedule.get_origin_display()),
    ]
    if schedule.status == ScheduleStatus.DRAFT or schedule.decider:
        rows.append(
            ("decider", f"{schedule.decider or '-'}, decide by {schedule.decide_by or '-'}")
        )
    return rows


def _utc(moment: datetime | None) -> str:
    return f"{upcoming.instant_words(moment.astimezone(UTC))} UTC" if moment else "-"


def _state(schedule: Schedule) -> list[tuple[str, str]]:
    """Enabled or disabled (by whom, when, why), planned or parked, next due."""
    if schedule.enabled:
        enabled = "enabled"
    else:
        when = f" at {_utc(schedule.disabled_at)}" if schedule.disabled_at else ""
        enabled = f"disabled by {schedule.disabled_by or '-'}{when}: {schedule.disabled_reason}"
    if schedule.parked_field:
        since = f" since {_utc(schedule.parked_at)}" if schedule.parked_at else ""
        planning = f"parked{since}: {schedule.parked_field}: {schedule.parked_reason}"
    else:
        planning = "planned"
    return [("enabled", enabled), ("planning", planning), ("next due", _utc(schedule.next_due_at))]


def recent_occurrences(schedule: Schedule, *, count: int = RECENT) -> list[RecentOccurrence]:
    """The newest ``count`` occurrences of ``schedule`` by scheduled instant, with lateness
    and duration."""
    first = Attempt.objects.filter(occurrence=OuterRef("pk"), number=1).values("started_at")
    rows = (
        Occurrence.objects.filter(schedule_id=schedule.pk)
        .annotate(first_started_at=Subquery(first[:1]))
        .order_by("-scheduled_at")[:count]
    )
    found = []
    for o in rows:
        began = o.first_started_at or o.attempt_started_at or o.started_at
        found.append(
            RecentOccurrence(
                o,
                began - o.scheduled_at if began else None,
                o.finished_at - o.started_at if o.finished_at and o.started_at else None,
            )
        )
    return found


def seconds_words(value: timedelta | None) -> str:
    """``250 ms``, ``3 min 5 s``, ``1 d 4 h``, ``-`` for none (``words.duration``)."""
    return words.duration(value)
