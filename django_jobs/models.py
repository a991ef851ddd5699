"""The tables of django_jobs. docs/data-model.md explains why each column exists.

Occurrence and lease state is written only by `django_jobs.store`; these classes declare fields,
constraints and indexes, and validate schedule records.
"""

from __future__ import annotations

from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import JSONField, Q, Value

from .scheduling.policies import (
    Misfire,
    OnExcluded,
    Overlap,
    RepeatedTime,
    SkippedTime,
    TimingKind,
    choices,
)


class Origin(models.TextChoices):
    """Where a schedule record comes from: sync retires only code-declared ones."""

    CODE = "code", "declared in a schedules.py module"
    RUNTIME = "runtime", "created at run time through the service layer"


class IdempotencyScope(models.TextChoices):
    OCCURRENCE = "occurrence", "the occurrence identity"


class ScheduleStatus(models.TextChoices):
    DRAFT = "draft", "draft"
    ACTIVE = "active", "active"
    RETIRED = "retired", "retired"


class Schedule(models.Model):
    """The schedule record: when a job runs, how it recovers, and who answers for it."""

    tenant = models.CharField(max_length=100, blank=True, default="")
    key = models.CharField(max_length=200)
    job = models.CharField(max_length=200)

    timing_kind = models.CharField(max_length=10, choices=choices(TimingKind))
    cron = models.CharField(max_length=200, blank=True, default="")
    interval = models.DurationField(null=True, blank=True)
    anchor = models.DateTimeField(null=True, blank=True)
    run_at = models.DateTimeField(null=True, blank=True)
    delay = models.DurationField(null=True, blank=True)
    time_zone = models.CharField(max_length=64, default="UTC")
    skipped_time = models.CharField(
        max_length=10, choices=choices(SkippedTime), default=SkippedTime.SHIFT
    )
    repeated_time = models.CharField(
        max_length=10, choices=choices(RepeatedTime), default=RepeatedTime.FIRST
    )
    # A calendar rule (timing ``rrule``): the RFC 5545 rule, the business calendar's
    # definition (holidays with the package version, dates, weekends; {} when none) and what
    # an occurrence on an excluded date does.
    # Database defaults too: a row inserted by an older release during a rolling deploy (or
    # written by hand) gets them.
    rrule = models.TextField(blank=True, default="", db_default="")
    calendar = models.JSONField(blank=True, default=dict, db_default=Value({}, JSONField()))
    on_excluded = models.CharField(
        max_length=10,
        choices=choices(OnExcluded),
        default=OnExcluded.SKIP,
        db_default=OnExcluded.SKIP.value,
    )
    # Why a business-local (non-UTC) schedule is not UTC: its documented deviation.
    zone_reason = models.TextField(
        "reason for a non-UTC zone",
        blank=True,
        default="",
        help_text="Why this business-local schedule runs in its zone instead of UTC.",
    )

    max_delay = models.DurationField(default=timedelta(minutes=5))
    overlap = models.CharField(max_length=10, choices=choices(Overlap), default=Overlap.SKIP)
    misfire = models.CharField(max_length=20, choices=choices(Misfire), default=Misfire.SKIP)
    max_catchup = models.PositiveIntegerField(default=100)
    idempotency_scope = models.CharField(
        max_length=20, choices=IdempotencyScope.choices, default=IdempotencyScope.OCCURRENCE
    )
    max_attempts = models.PositiveIntegerField(default=3)
    backoff = models.DurationField(default=timedelta(seconds=30))
    max_backoff = models.DurationField(default=timedelta(minutes=10))
    timeout = models.DurationField(default=timedelta(minutes=15))

    operating_owner = models.CharField(max_length=200)
    record_owner = models.CharField(max_length=200)
    status = models.CharField(max_length=10, choices=ScheduleStatus.choices)
    decider = models.CharField(max_length=200, blank=True, default="")
    decide_by = models.DateField(null=True, blank=True)

    enabled = models.BooleanField(default=True)
    disabled_by = models.CharField(max_length=200, blank=True, default="")
    disabled_reason = models.TextField(blank=True, default="")
    disabled_at = models.DateTimeField(null=True, blank=True)

    # Recovery points: what the planner continues from after a restart.
    last_scheduled_at = models.DateTimeField(null=True, blank=True)
    last_started_at = models.DateTimeField(null=True, blank=True)
    last_completed_at = models.DateTimeField(null=True, blank=True)
    next_due_at = models.DateTimeField(null=True, blank=True)

    # The occurrence now processing, for schedules whose overlap policy is not "allow": claims
    # check and set it under the schedule row's lock, so two replicas can never both start one.
    running_occurrence = models.UUIDField(null=True, blank=True, editable=False)

    origin = models.CharField(max_length=10, choices=Origin.choices, default=Origin.CODE)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    # When the schedule was retired (sync, or a one-off whose occurrence is final): a retired
    # one-off is removed with its rows once its retention has passed since then.
    retired_at = models.DateTimeField(null=True, blank=True)
    # Parked: the planner found a value it refuses (``parked_field``, why in
    # ``parked_reason``) and stopped planning the schedule (``next_due_at`` cleared) until the
    # record is written again (sync, upsert_schedule, enable). A schedule parked because no
    # handler of its job was registered on the planning replica is taken up again by the
    # first replica that has one (a rolling deploy).
    parked_at = models.DateTimeField(null=True, blank=True)
    parked_field = models.CharField(max_length=50, blank=True, default="", db_default="")
    parked_reason = models.TextField(blank=True, default="", db_default="")

    class Meta:
        # Object permissions (django-guardian) an operator needs on a schedule, besides
        # Django's view_schedule: see django_jobs/permissions.py.
        permissions = [
            ("replay_schedule", "Can replay occurrences of the schedule"),
            ("disable_schedule", "Can disable and enable the schedule"),
            ("run_schedule", "Can run the schedule now"),
            ("purge_schedule", "Can purge the schedule's finished occurrences"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key"], name="django_jobs_schedule_key"),
            models.CheckConstraint(
                condition=~Q(status=ScheduleStatus.DRAFT)
                | (~Q(decider="") & Q(decide_by__isnull=False)),
                name="django_jobs_draft_has_decider",
                violation_error_message="A draft schedule must name a decider and a decide-by.",
            ),
            models.CheckConstraint(
                condition=~Q(operating_owner="") & ~Q(record_owner=""),
                name="django_jobs_schedule_has_owners",
            ),
            models.CheckConstraint(
                condition=(Q(timing_kind=TimingKind.CRON) & ~Q(cron=""))
                | (Q(timing_kind=TimingKind.RRULE) & ~Q(rrule=""))
                | (
                    Q(timing_kind=TimingKind.INTERVAL)
                    & Q(interval__gt=timedelta(0))
                    & Q(anchor__isnull=False)
                )
                | (Q(timing_kind=TimingKind.AT) & Q(run_at__isnull=False))
                | (
                    Q(timing_kind=TimingKind.AFTER)
                    & Q(run_at__isnull=False)
                    & Q(delay__gte=timedelta(0))
                ),
                name="django_jobs_schedule_timing_complete",
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="django_jobs_schedule_max_attempts"
            ),
            models.CheckConstraint(
                condition=Q(enabled=True) | ~Q(disabled_reason=""),
                name="django_jobs_disabled_has_reason",
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_due_at"],
                name="django_jobs_schedule_due",
                condition=Q(enabled=True, status=ScheduleStatus.ACTIVE),
            ),
            # The plan pass takes up schedules parked for a job its replica has (a few rows).
            models.Index(
                fields=["job"],
                name="django_jobs_parked_job",
                condition=Q(parked_field="job"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.key}" if self.tenant else self.key

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        if self.status == ScheduleStatus.DRAFT:
            if not self.decider:
                errors.setdefault("decider", []).append(
                    f"Schedule {self}: a draft must name a decider."
                )
            if self.decide_by is None:
                errors.setdefault("decide_by", []).append(
                    f"Schedule {self}: a draft must name a decide-by date."
                )
        if errors:
            raise ValidationError(errors)


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

    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_error_type = models.CharField(max_length=200, blank=True, default="")
    last_error_message = models.TextField(blank=True, default="")

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
            # The claim query: due work in a claimable state, oldest first.
            models.Index(
                fields=["due_at"],
                name="django_jobs_occurrence_due",
                condition=Q(state__in=CLAIMABLE_STATES),
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
        ]

    def __str__(self) -> str:
        return f"{self.schedule}@{self.scheduled_at.isoformat()}"


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


class Limit(models.Model):
    """How long, or how many, of a schedule's finished occurrences are kept."""

    schedule = models.OneToOneField(Schedule, on_delete=models.CASCADE, related_name="limit")
    keep_for = models.DurationField(null=True, blank=True)
    keep_last = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(keep_for__isnull=False) | Q(keep_last__isnull=False),
                name="django_jobs_limit_not_empty",
            ),
            models.CheckConstraint(
                condition=Q(keep_for__isnull=True) | Q(keep_for__gt=timedelta(0)),
                name="django_jobs_limit_keep_for_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"retention of {self.schedule}"


class RunbookKind(models.TextChoices):
    INSPECT = "inspect", "inspection"
    REPLAY = "replay", "manual replay"
    DISABLE = "disable", "disable"


class Runbook(models.Model):
    """A recovery procedure for one schedule, naming the exact interface that performs it."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="runbooks")
    kind = models.CharField(max_length=10, choices=RunbookKind.choices)
    interface = models.TextField()
    claimed_occurrence_effect = models.TextField()
    verification = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["schedule", "kind"], name="django_jobs_runbook_kind"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} runbook of {self.schedule}"


class AuditRecord(models.Model):
    """Who did what to which schedule or occurrence, why, and what changed. Never edited."""

    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField()
    # The username when it acted (what a reader recognises) and the user's primary key (what
    # identifies them: a username can be renamed or reused). No actor id for the system's own
    # actors (``django_jobs.sync``, ``.planner``, ``.retention``). Text, not a foreign key:
    # records outlive the user, and AUTH_USER_MODEL's key need not be an integer. NULL, not
    # "", says "no user": the way Django's own admin LogEntry keeps object ids.
    actor = models.CharField(max_length=200)
    actor_id = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001
    action = models.CharField(max_length=50)
    tenant = models.CharField(max_length=100, blank=True, default="")
    # The schedule the record concerns, its own or its occurrence's: what the admin scopes
    # and filters records by. A plain integer, not a foreign key: the records of a removed
    # schedule stay. Null only for records older than the column whose occurrence was gone.
    schedule_id = models.BigIntegerField(null=True, blank=True)
    target_type = models.CharField(max_length=50)
    target_id = models.CharField(max_length=100)
    reason = models.TextField()
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["target_type", "target_id", "at"]),
            # The Audit list, newest first, and one schedule's records (its change page, the
            # list filtered to it): both read in index order, whatever the table's size.
            models.Index(fields=["-at", "-id"], name="django_jobs_audit_newest"),
            models.Index(fields=["schedule_id", "-at", "-id"], name="django_jobs_audit_schedule"),
            models.Index(fields=["tenant", "-at", "-id"], name="django_jobs_audit_tenant"),
        ]
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} {self.target_type}:{self.target_id} by {self.actor}"


class ReplicaState(models.TextChoices):
    RUNNING = "running", "running"
    DRAINING = "draining", "draining (stopping, releasing its work)"
    STOPPED = "stopped", "stopped"


class Replica(models.Model):
    """A ``runworker`` process, as it last reported itself. Written by its own heartbeat."""

    id = models.CharField(max_length=200, primary_key=True)
    host = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    state = models.CharField(max_length=10, choices=ReplicaState.choices)
    concurrency = models.PositiveIntegerField(default=1)
    running = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["host", "heartbeat_at"], name="django_jobs_replica_host")]

    def __str__(self) -> str:
        return self.id


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


class TenantGrant(models.Model):
    """A permission on every schedule of a tenant, for the members of a group: how staff of one
    tenant are scoped to it (object permissions on single schedules come from guardian)."""

    group = models.ForeignKey("auth.Group", on_delete=models.CASCADE, related_name="tenant_grants")
    tenant = models.CharField(max_length=100)
    permission = models.CharField(max_length=30)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["group", "tenant", "permission"], name="django_jobs_tenant_grant"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.group} may {self.permission} in tenant {self.tenant}"


class ConsumedOneOff(models.Model):
    """A declared one-off (``at()``/``after()``) whose occurrence became final: ``jobs sync``
    does not create it again, even after its schedule row is removed by retention. A
    declaration with another instant (``at``) or delay (``after``) is a new one-off."""

    tenant = models.CharField(max_length=100, blank=True, default="")
    key = models.CharField(max_length=200)
    timing_kind = models.CharField(max_length=10, choices=choices(TimingKind))
    run_at = models.DateTimeField(null=True, blank=True)  # at(): the instant
    delay = models.DurationField(null=True, blank=True)  # after(): the delay
    consumed_at = models.DateTimeField()

    class Meta:
        # Partial unique indexes, not NULLS NOT DISTINCT: PostgreSQL 14 is supported.
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "key", "run_at"],
                condition=Q(timing_kind="at"),
                name="django_jobs_consumed_at",
            ),
            models.UniqueConstraint(
                fields=["tenant", "key", "delay"],
                condition=Q(timing_kind="after"),
                name="django_jobs_consumed_after",
            ),
            models.CheckConstraint(
                condition=(Q(timing_kind="at") & Q(run_at__isnull=False))
                | (Q(timing_kind="after") & Q(delay__isnull=False)),
                name="django_jobs_consumed_names_its_timing",
            ),
        ]

    def __str__(self) -> str:
        name = f"{self.tenant}/{self.key}" if self.tenant else self.key
        return f"{name} (consumed {self.consumed_at.isoformat()})"


class RetentionState(models.Model):
    """What automatic retention did last, fleet-wide (one row, written by the replica that
    held the retention lock): ``jobs health --json`` reports it."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    replica = models.CharField(max_length=200)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    deleted = models.PositiveBigIntegerField(default=0)  # occurrences deleted by the pass
    retired = models.PositiveIntegerField(default=0)  # one-offs retired by the pass
    removed = models.PositiveIntegerField(default=0)  # retired one-offs removed by the pass
    seconds = models.FloatField(default=0)  # time spent deleting
    caught_up = models.BooleanField(default=True)  # nothing past retention was left
    caught_up_at = models.DateTimeField(null=True, blank=True)  # the last pass that was

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="django_jobs_one_state")]

    def __str__(self) -> str:
        return f"retention at {self.finished_at.isoformat()} by {self.replica}"
