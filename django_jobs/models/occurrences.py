"""An occurrence (one planned run of a schedule, with its lease), its ``Attempt``s and the
``Step``s it already did. Their state is written only by ``django_jobs.store``.
"""

from __future__ import annotations

from django.db import models
from django.db.models import F, Func, JSONField, Q, Value
from django.db.models.functions import Cast

from .. import words
from .schedules import Schedule


class OccurrenceState(models.TextChoices):
    SCHEDULED = "scheduled", "scheduled"
    PROCESSING = "processing", "processing"
    COMPLETED = "completed", "completed"
    FAILED = "failed", "failed, waiting for a retry"
    DEAD = "dead", "dead (poison)"
    SKIPPED = "skipped", "skipped"
    CANCELLED = "cancelled", "cancelled"


# States in which an occurrence needs a worker once its `due_at` has passed.
CLAIMABLE_STATES = (
    OccurrenceState.SCHEDULED,
    OccurrenceState.FAILED,
    OccurrenceState.PROCESSING,  # due_at is the lease expiry: claimable once the lease has expired
)
TERMINAL_STATES = (
    OccurrenceState.COMPLETED,
    OccurrenceState.DEAD,
    OccurrenceState.SKIPPED,
    OccurrenceState.CANCELLED,
)
# Terminal states an occurrence reaches only after a claim (a skipped one never started):
# with the claimable ones, every state whose ``started_at`` may be set.
STARTED_AND_ENDED = (
    OccurrenceState.COMPLETED,
    OccurrenceState.DEAD,
    OccurrenceState.CANCELLED,
)


class SkipReason(models.TextChoices):
    MISFIRE = "misfire", "missed its maximum start delay"
    OVERLAP = "overlap", "the previous occurrence was still running"
    DISABLED = "disabled", "the schedule was disabled"
    EXCLUDED = "excluded", "its date is excluded by the schedule's calendar"


class Trigger(models.TextChoices):
    SCHEDULE = "schedule", "the schedule"
    RETRY = "retry", "a retry"
    MANUAL = "manual", "a manual replay or run-now"
    CATCHUP = "catchup", "a missed run replayed by the misfire policy"
    ENQUEUED = "enqueued", "enqueued by application code (enqueue())"


# One point of priority is worth this many minutes of waiting: claims order due work by
# ``due_at - priority minutes`` (the SQL function ``django_jobs_claim_order``, created by
# migration 0013, IMMUTABLE so that an index can hold it). Higher priority goes first among
# work due within that many minutes of each other, and work of low priority goes before any
# of higher priority that became due more than the difference later: never starved.
PRIORITY_MINUTES = 1


class ClaimOrder(Func):
    """``django_jobs_claim_order(due_at, priority)``: the order claims take due work in."""

    function = "django_jobs_claim_order"
    output_field = models.DateTimeField()


# The claim order of one queue's claim (store/sql/claims.sql, ``{queue_order}``): the value of
# ``ClaimOrder(due_at, priority)``, written as ``(priority + 0)::smallint`` so that only
# django_jobs_occurrence_queue holds it. Ordered by the plain expression, a claim of one queue
# could be planned on the claim index filtered by queue, which the statistics of interleaved
# queues make look as cheap, and which reads every other queue's row due before the first of
# this one (equal to the queue, ``ORDER BY queue, ...`` is no help: the planner drops it).
QUEUE_CLAIM_ORDER = ClaimOrder(
    F("due_at"), Cast(F("priority") + Value(0), models.SmallIntegerField())
)

# Always true (check constraint django_jobs_token_not_negative): the condition of the indexes
# only the admin's occurrences list walks (django_jobs_occurrence_newest, _dnewest).
NEWEST_FIRST_GUARD = Q(fencing_token__gte=0)


class Occurrence(models.Model):
    """One planned run of a schedule, with its lease."""

    # Derived from (tenant, schedule key, scheduled instant): see django_jobs.identity.
    id = models.UUIDField(primary_key=True, editable=False)
    # Indexed by the (schedule, scheduled_at) indexes below, which lead with it.
    schedule = models.ForeignKey(
        Schedule, on_delete=models.PROTECT, related_name="occurrences", db_index=False
    )
    tenant = models.CharField(max_length=100, blank=True, default="")
    scheduled_at = models.DateTimeField()

    state = models.CharField(
        max_length=12, choices=OccurrenceState.choices, default=OccurrenceState.SCHEDULED
    )
    skip_reason = models.CharField(max_length=10, choices=SkipReason.choices, blank=True)
    trigger = models.CharField(max_length=10, choices=Trigger.choices, default=Trigger.SCHEDULE)
    # When the occurrence next needs a worker: its scheduled or retry instant, or, while
    # processing, its lease expiry. One column lets one partial index serve every claim.
    due_at = models.DateTimeField()

    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    fencing_token = models.BigIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)

    # The current (latest) attempt lives on this row: its number (``attempts``), token,
    # owner and lease, claimed at ``started_at``, running since ``attempt_started_at`` (NULL:
    # claimed ahead of a free run thread, not started). Its ``Attempt`` row is written once,
    # when it ends (``current_attempt`` reads it before then).
    started_at = models.DateTimeField(null=True, blank=True)
    attempt_started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_error_type = models.CharField(max_length=200, blank=True, default="")
    last_error_message = models.TextField(blank=True, default="")
    # The arguments this run is for (``Run.args``): its schedule's when it was planned, or
    # what an operator's run-now gave. The same for every retry and replay of it.
    args = models.JSONField(
        "arguments", blank=True, default=dict, db_default=Value({}, JSONField())
    )
    # Its schedule's (or the enqueue's) priority when it was planned: see PRIORITY_MINUTES.
    priority = models.SmallIntegerField(default=0, db_default=0)
    # The queue it is claimed from: its schedule's when it was planned, or the enqueue's.
    # Retries and replays keep it; a change of its schedule's queue moves it while it waits
    # to start (scheduled, or failed waiting for a retry: ``store.write_records``).
    # ``runworker --queue`` claims only its queues' rows, through
    # django_jobs_occurrence_queue; ``DJANGO_JOBS["QUEUES"]`` may cap a queue's running ones.
    queue = models.CharField(max_length=100, default="default", db_default="default")
    # What the handler returned (JSON), written with the completion; NULL: nothing (None),
    # or not completed.
    result = models.JSONField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=~Q(state=OccurrenceState.PROCESSING)
                | (~Q(lease_owner="") & Q(lease_expires_at__isnull=False)),
                name="django_jobs_processing_has_lease",
            ),
            models.CheckConstraint(
                condition=Q(fencing_token__gte=0), name="django_jobs_token_not_negative"
            ),
            models.CheckConstraint(
                condition=~Q(state=OccurrenceState.SKIPPED) | ~Q(skip_reason=""),
                name="django_jobs_skipped_has_reason",
            ),
        ]
        indexes = [
            # The earliest due instant (a worker's next wake-up).
            models.Index(
                fields=["due_at"],
                name="django_jobs_occurrence_due",
                condition=Q(state__in=CLAIMABLE_STATES),
            ),
            # The claim query: due work in a claimable state, in claim order (priority, then
            # oldest due: PRIORITY_MINUTES).
            models.Index(
                ClaimOrder(F("due_at"), F("priority")),
                name="django_jobs_occurrence_claim",
                condition=Q(state__in=CLAIMABLE_STATES),
            ),
            # A claim of a replica that serves named queues (``runworker --queue``): one
            # range of this index per queue, each walked in claim order, so the rows of
            # queues it does not serve are never read.
            models.Index(
                F("queue"),
                QUEUE_CLAIM_ORDER,
                name="django_jobs_occurrence_queue",
                condition=Q(state__in=CLAIMABLE_STATES),
            ),
            # The wake-up lookup of a replica that serves named queues
            # (``store.next_wakeup(queues=)``): one range per queue, its first entry the
            # queue's earliest due instant, whatever the other queues hold. Its second
            # column is due_at as ``django_jobs_claim_order(due_at, 0)``, an expression no
            # other index holds: ordered by it, the lookup cannot be planned as a walk of
            # django_jobs_occurrence_due filtered by queue (costed the same whenever the
            # statistics say the queue holds most rows, and reading every other queue's).
            models.Index(
                F("queue"),
                ClaimOrder(F("due_at"), Cast(Value(0), models.SmallIntegerField())),
                name="django_jobs_occurrence_qdue",
                condition=Q(state__in=CLAIMABLE_STATES),
            ),
            # A queue's running occurrences, counted under its lock by a claim when the queue
            # has a fleet-wide limit (``DJANGO_JOBS["QUEUES"]``, ``MAX_RUNNING``).
            models.Index(
                fields=["queue", "lease_expires_at"],
                name="django_jobs_occurrence_running",
                condition=Q(state=OccurrenceState.PROCESSING),
            ),
            # Whether a schedule has an occurrence processing: the overlap check of every
            # claimed row of a skip/queue schedule, one probe of that schedule's entries. On
            # django_jobs_occurrence_running instead, filtered by schedule, each probe read
            # every entry of the index, a burst's dead ones too: most of a claim's time
            # (issue #38, docs/performance.md).
            models.Index(
                fields=["schedule"],
                name="django_jobs_occurrence_holding",
                condition=Q(state=OccurrenceState.PROCESSING),
            ),
            models.Index(fields=["schedule", "-scheduled_at"], name="django_jobs_occurrence_sched"),
            # The plan pass: a schedule's unfinished occurrences (missed, running), without
            # walking its history.
            models.Index(
                fields=["schedule", "scheduled_at"],
                name="django_jobs_occurrence_live",
                condition=Q(state__in=CLAIMABLE_STATES),
            ),
            models.Index(
                fields=["schedule", "scheduled_at"],
                name="django_jobs_occurrence_dead",
                condition=Q(state=OccurrenceState.DEAD),
            ),
            # A schedule's last completion and last start, read from its occurrences
            # (services.with_recovery_points) instead of written on the schedule row at every
            # claim and completion: one probe each. Written once per occurrence, when it ends;
            # a start still running is found through django_jobs_occurrence_live.
            models.Index(
                fields=["schedule", "finished_at"],
                name="django_jobs_occurrence_finish",
                condition=Q(state=OccurrenceState.COMPLETED),
            ),
            models.Index(
                fields=["schedule", "started_at"],
                name="django_jobs_occurrence_start",
                condition=Q(state__in=STARTED_AND_ENDED),
            ),
            # The admin's occurrences list, newest first over every schedule (and its dead
            # letters): walked backwards a page at a time. The condition is always true (the
            # check constraint above): only a query that says it too, the admin's list
            # (NEWEST_FIRST_GUARD), may use them, so a schedule's own newest occurrences keep
            # django_jobs_occurrence_sched, never a walk of every schedule's rows.
            models.Index(
                fields=["-scheduled_at", "-id"],
                name="django_jobs_occurrence_newest",
                condition=NEWEST_FIRST_GUARD,
            ),
            models.Index(
                fields=["-scheduled_at", "-id"],
                name="django_jobs_occurrence_dnewest",
                condition=NEWEST_FIRST_GUARD & Q(state=OccurrenceState.DEAD),
            ),
        ]

    def __str__(self) -> str:
        """``acme/billing.nightly at 2026-12-07 06:30:00 UTC`` (``words.instant``, exact)."""
        return f"{self.schedule} at {words.instant(self.scheduled_at, exact=True)}"

    def current_attempt(self) -> Attempt | None:
        """The attempt that holds the lease now, read from this row (unsaved: its ``Attempt``
        row is written when it ends), or None when nothing holds one."""
        if self.state != OccurrenceState.PROCESSING or not self.attempts:
            return None
        started = self.attempt_started_at
        return Attempt(
            occurrence=self,
            number=self.attempts,
            fencing_token=self.fencing_token,
            replica=self.lease_owner,
            trigger=self.trigger,
            started_at=started or self.started_at or self.scheduled_at,
            outcome=AttemptOutcome.RUNNING if started else AttemptOutcome.CLAIMED,
        )

    def attempts_so_far(self) -> list[Attempt]:
        """Every attempt in order: the ended ones' rows, then the current one, if any (a
        row a release before #38 left open for it stands in for it)."""
        ended = list(self.attempt_history.order_by("number"))
        current = self.current_attempt()
        if current is not None and all(a.fencing_token != current.fencing_token for a in ended):
            ended.append(current)
        return ended


class AttemptOutcome(models.TextChoices):
    # Claimed ahead of a free run thread; ``running`` once a thread starts it. Only a started
    # attempt whose lease lapses counts as a failure.
    CLAIMED = "claimed", "claimed, waiting for a run thread"
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    TIMED_OUT = "timed_out", "timed out"
    CANCELLED = "cancelled", "cancelled"
    RELEASED = "released", "released on shutdown"
    LEASE_LOST = "lease_lost", "lost: the lease lapsed without an outcome (counted as a failure)"
    FENCED_OUT = "fenced_out", "completion refused: stale fencing token"
    UNSTARTED = "unstarted", "claimed ahead, never started (not counted)"
    OUTAGE = "outage", "ended by a store outage (not counted as a failure)"


class Attempt(models.Model):
    """One claim of an occurrence by a worker, and how it ended."""

    # Indexed by the unique (occurrence, number) constraint below, which leads with it.
    occurrence = models.ForeignKey(
        Occurrence, on_delete=models.CASCADE, related_name="attempt_history", db_index=False
    )
    number = models.PositiveIntegerField()
    fencing_token = models.BigIntegerField()
    replica = models.CharField(max_length=200)
    trigger = models.CharField(max_length=10, choices=Trigger.choices)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(
        max_length=12, choices=AttemptOutcome.choices, default=AttemptOutcome.RUNNING
    )
    error_type = models.CharField(max_length=200, blank=True, default="")
    error_message = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["occurrence", "number"], name="django_jobs_attempt_number"
            ),
            models.UniqueConstraint(
                fields=["occurrence", "fencing_token"], name="django_jobs_attempt_token"
            ),
        ]
        ordering = ["occurrence", "number"]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.occurrence_id}"


class Step(models.Model):
    """A side effect of an occurrence that already happened (``run.once``): a duplicate
    execution after a crash skips it."""

    occurrence = models.ForeignKey(Occurrence, on_delete=models.CASCADE, related_name="steps")
    name = models.CharField(max_length=200)
    fencing_token = models.BigIntegerField()
    done_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["occurrence", "name"], name="django_jobs_step_once"),
        ]

    def __str__(self) -> str:
        return f"{self.name} of {self.occurrence_id}"
