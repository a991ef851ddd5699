"""The tables of django_jobs. docs/data-model.md explains why each column exists.

Occurrence and lease state is written only by `django_jobs.store`; these classes declare fields,
constraints and indexes, and validate schedule records. One module per noun: ``schedules``,
``occurrences``, ``access`` (grants and the audit trail), ``fleet`` (replicas, retention,
the last sync) and ``task_paths`` (the task paths the Tasks backend enqueued). Django finds
the models here: every one is imported below, and every name is importable from
``django_jobs.models`` as before.
"""

from __future__ import annotations

from .access import AuditRecord, TenantGrant
from .fleet import Replica, ReplicaState, RetentionState, SyncState
from .occurrences import (
    CLAIMABLE_STATES,
    STARTED_AND_ENDED,
    TERMINAL_STATES,
    Attempt,
    AttemptOutcome,
    Occurrence,
    OccurrenceState,
    SkipReason,
    Step,
    Trigger,
)
from .schedules import (
    ConsumedOneOff,
    IdempotencyScope,
    Limit,
    Origin,
    Runbook,
    RunbookKind,
    Schedule,
    ScheduleStatus,
)
from .task_paths import TaskPath

__all__ = [
    "CLAIMABLE_STATES",
    "STARTED_AND_ENDED",
    "TERMINAL_STATES",
    "Attempt",
    "AttemptOutcome",
    "AuditRecord",
    "ConsumedOneOff",
    "IdempotencyScope",
    "Limit",
    "Occurrence",
    "OccurrenceState",
    "Origin",
    "Replica",
    "ReplicaState",
    "RetentionState",
    "Runbook",
    "RunbookKind",
    "Schedule",
    "ScheduleStatus",
    "SkipReason",
    "Step",
    "SyncState",
    "TaskPath",
    "TenantGrant",
    "Trigger",
]
