"""The occurrence and lease store: the only code that writes occurrence and lease state.

One function per operation, each one SQL statement (one round trip), but for the claim: it
is two statements in a transaction, three inside a caller's, because the planner settings it
needs must be in force before its statement is planned (``claim_runs`` says why and how).
Every instant comes from the caller's clock as a parameter; nothing here compares with
PostgreSQL's ``now()``, which is frozen for the length of a transaction.

Fencing: every claim of an occurrence sets its ``fencing_token`` from one sequence, so tokens
grow with every claim of an occurrence's identity, across a purge of its row and a replay that
creates it again (``claims.claim_runs``). Every write that ends or extends a claim names the
token it holds and changes nothing unless that token is still the occurrence's current one and
the owner matches. A refused write is recorded on its Attempt as ``fenced_out`` and reported
to the caller.

Each function runs on Django's default connection inside whatever transaction the caller holds
(autocommit otherwise), so a service can combine a store write with its audit record.

The package is laid out by concern; each module's docstring says what it owns, and its
statements are named queries in ``sql/<concern>.sql`` (``_sql.load_queries``). Callers
use the operations through this package (``store.claim_runs``), never a module of it.
"""

from __future__ import annotations

from ._sql import TENANT_MISMATCH, WORKER_LOST
from .claims import RUN_FIELDS, claim_runs
from .clock import database_clock
from .completion import (
    complete,
    dead_letter,
    excuse_outage,
    fail,
    outage_streak,
    record_result,
    release,
)
from .console import due_work, outcomes_by_bucket, queue_work, schedule_lines
from .enqueue import EnqueueWrite, TaskPathRecord, enqueue, task_path_recorded
from .leases import hold, mark_started, renew
from .metrics import (
    Buckets,
    Window,
    dead_letters,
    due_backlog,
    oldest_due,
    recent_window,
    running_by_queue,
    waiting_queues,
)
from .operator import cancel_occurrence, cancel_running, replay
from .planning import (
    Advance,
    MissedSummary,
    Parked,
    PlanBatch,
    PlanningContext,
    PlanWrite,
    Skipped,
    Unreadable,
    insert_occurrences,
    lock_for_sync,
    lock_schedules_to_plan,
    park,
    park_unplannable,
    park_unreadable,
    plan,
    planning_context,
    read_plan_batch,
    record_skip_summary,
    withdraw_planned_ahead,
    write_plan,
)
from .records import (
    Claimed,
    Ended,
    Lease,
    PlannedOccurrence,
    WriteResult,
    planned_occurrences,
)
from .replicas import (
    CHANNEL,
    Gone,
    declare_gone,
    heartbeat,
    next_schedule_due,
    next_wakeup,
    notify,
)
from .retention import (
    Consumed,
    ScheduleName,
    consumed_one_offs,
    purge_batch,
    purge_page,
    record_retention,
    release_retention_lock,
    remove_retired_one_offs,
    retire_one_offs,
    schedules_with_limits,
    try_retention_lock,
)
from .schedules import (
    copy_audit,
    insert_limits,
    insert_runbooks,
    insert_schedules,
    write_disabled,
    write_enabled,
    write_limits,
    write_records,
    write_runbooks,
    write_status,
)
from .statistics import REFRESH_AT_LEAST, refresh_statistics
from .steps import record_step, step_done
from .watch import queue_due_work, recent_failures, running_occurrences

__all__ = [
    "CHANNEL",
    "REFRESH_AT_LEAST",
    "RUN_FIELDS",
    "TENANT_MISMATCH",
    "WORKER_LOST",
    "Advance",
    "Buckets",
    "Claimed",
    "Consumed",
    "Ended",
    "EnqueueWrite",
    "Gone",
    "Lease",
    "MissedSummary",
    "Parked",
    "PlanBatch",
    "PlanWrite",
    "PlannedOccurrence",
    "PlanningContext",
    "ScheduleName",
    "Skipped",
    "TaskPathRecord",
    "Unreadable",
    "Window",
    "WriteResult",
    "cancel_occurrence",
    "cancel_running",
    "claim_runs",
    "complete",
    "consumed_one_offs",
    "copy_audit",
    "database_clock",
    "dead_letter",
    "dead_letters",
    "declare_gone",
    "due_backlog",
    "due_work",
    "enqueue",
    "excuse_outage",
    "fail",
    "heartbeat",
    "hold",
    "insert_limits",
    "insert_occurrences",
    "insert_runbooks",
    "insert_schedules",
    "lock_for_sync",
    "lock_schedules_to_plan",
    "mark_started",
    "next_schedule_due",
    "next_wakeup",
    "notify",
    "oldest_due",
    "outage_streak",
    "outcomes_by_bucket",
    "park",
    "park_unplannable",
    "park_unreadable",
    "plan",
    "planned_occurrences",
    "planning_context",
    "purge_batch",
    "purge_page",
    "queue_due_work",
    "queue_work",
    "read_plan_batch",
    "recent_failures",
    "recent_window",
    "record_result",
    "record_retention",
    "record_skip_summary",
    "record_step",
    "refresh_statistics",
    "release",
    "release_retention_lock",
    "remove_retired_one_offs",
    "renew",
    "replay",
    "retire_one_offs",
    "running_by_queue",
    "running_occurrences",
    "schedule_lines",
    "schedules_with_limits",
    "step_done",
    "task_path_recorded",
    "try_retention_lock",
    "waiting_queues",
    "withdraw_planned_ahead",
    "write_disabled",
    "write_enabled",
    "write_limits",
    "write_plan",
    "write_records",
    "write_runbooks",
    "write_status",
]
