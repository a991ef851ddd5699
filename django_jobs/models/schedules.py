"""The schedule record and what hangs off it: its retention ``Limit``, its ``Runbook``s, and
the declared one-offs already consumed (``ConsumedOneOff``). docs/data-model.md explains why
each column exists.
"""

from __future__ import annotations

from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import JSONField, Q, Value

from ..scheduling.policies import (
    Misfire,
    OnExcluded,
    Overlap,
    RepeatedTime,
    SkippedTime,
    TimingKind,
    choices,
)
from ..validation import MAX_PRIORITY, MIN_PRIORITY, draft_gaps


class Origin(models.TextChoices):
    """Where a schedule record comes from: sync retires only code-declared ones."""

    CODE = "code", "declared in a schedules.py module"
    RUNTIME = "runtime", "created at run time through the service layer"
    # The policies of one job's enqueued work in one tenant (``enqueue()``): created by the
    # first enqueue, its policies kept equal to the job's ``@job(...)`` by ``jobs sync``.
    ENQUEUE = "enqueue", "the policy record of a job's enqueued work"


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

    # What the job is run for: a JSON object each occurrence snapshots when it is planned
    # (``Occurrence.args``), so a later change never alters a run already planned. A
    # database default too, for rows an older release inserts during a rolling deploy.
    args = models.JSONField(
        "arguments", blank=True, default=dict, db_default=Value({}, JSONField())
    )

    # Claims take higher priority first (see ``Occurrence.priority``); each occurrence
    # snapshots it when it is planned.
    priority = models.SmallIntegerField(default=0, db_default=0)
    # The queue its occurrences are planned on (``schedule(queue=)``; a policy record's:
    # ``@job(queue=)``): each occurrence snapshots it (``Occurrence.queue``), and a replica
    # started with ``runworker --queue`` claims only its queues' work.
    queue = models.CharField(max_length=100, default="default", db_default="default")

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
    # Disabled by its tenant's pause (``services.pause_tenant``), not by an operator: the
    # only schedules ``resume_tenant`` enables. A mark, never read from the reason's text,
    # which anyone who disables a schedule writes; any other disable or enable clears it.
    paused_by_tenant = models.BooleanField(default=False, db_default=False)

    # Recovery points: what the planner continues from after a restart. The last start and
    # completion are read from the occurrences (services.with_recovery_points), not written
    # here at every claim and completion.
    last_scheduled_at = models.DateTimeField(null=True, blank=True)
    next_due_at = models.DateTimeField(null=True, blank=True)

    # The occurrence last claimed, for schedules whose overlap policy is not "allow": claims
    # check and set it under the schedule row's lock (store/sql/claims.sql, ``due``), so two
    # replicas can never both start one; it stays on an occurrence that has ended.
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
                )
                # The policy record of enqueued work has no timing: never planned.
                | (Q(timing_kind=TimingKind.ENQUEUED) & Q(origin=Origin.ENQUEUE)),
                name="django_jobs_schedule_timing_complete",
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="django_jobs_schedule_max_attempts"
            ),
            models.CheckConstraint(
                condition=Q(enabled=True) | ~Q(disabled_reason=""),
                name="django_jobs_disabled_has_reason",
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=MIN_PRIORITY) & Q(priority__lte=MAX_PRIORITY),
                name="django_jobs_schedule_priority",
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
        for field, message in draft_gaps(self.status, self.decider, self.decide_by):
            errors.setdefault(field, []).append(f"Schedule {self}: {message}.")
        if errors:
            raise ValidationError(errors)


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
