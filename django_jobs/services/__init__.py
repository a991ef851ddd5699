"""The application service layer: every operation on schedules that interfaces perform.

Each service is a keyword-only function that runs in one transaction and writes its audit
record in that transaction. Admin and management commands call these; they never write the
store directly, and they find schedules and occurrences through the lookups here, which apply
the actor's permissions.

Every service decides with rows it reads itself: of the schedule or occurrence it is given it
uses only the primary key, re-reads that row (and locks its schedule when it writes), checks
the actor's permission and the tenant on what it read, and names the schedule and tenant in
every store write. A caller-built object (``Occurrence(pk=<theirs>, schedule=<mine>)``) can
therefore neither borrow a permission nor mislabel an audit record.

The package is laid out by noun; callers use ``services.<name>``, never a module of it:

- ``sync``: ``sync_schedules`` and ``sync_if_changed`` (declared schedules, as a set);
- ``schedules``: ``upsert_schedule`` (run-time schedules, one at a time);
- ``one_offs``: ``plan_late_one_offs`` (a one-off written after its instant: decided then);
- ``inspection``: the permission-scoped lookups, ``inspect_schedule``/``inspect_occurrence`` and
  ``with_recovery_points`` (a schedule's last start and completion, from its occurrences);
- ``summary``: ``schedule_summary`` (the admin's schedule page: timing in words, next runs
  with DST marked, policies, recent occurrences);
- ``replays``: ``replay`` and ``replay_at``;
- ``consequences``: what each operator action will do, in words (confirmations, CLI answers);
- ``operator``: ``disable``, ``enable``, ``run_now``, ``purge``, ``cancel`` (one occurrence);
- ``tenants``: ``pause_tenant`` and ``resume_tenant`` (every schedule of a tenant);
- ``health``: ``replica_health``;
- ``stranded``: ``stranded_schedules`` (active records nothing will run: check W031);
- ``dashboard``: ``dashboard`` (the console's page: replicas, due work, schedules' lines, a chart);
- ``listing``: ``list_schedules`` (``jobs list``'s lines), ``schedule_standing`` (what
  ``jobs inspect``'s next steps read);
- ``watch``: ``watch`` (``jobs top``: backlog, running, recent failures, replicas, scoped the same);
- ``metrics``: ``fleet_metrics`` (what a Prometheus scrape reports, fleet-wide);
- ``timeline``: ``now``, the instant interfaces pass to the others;
- ``rows``: reading the rows a service decides with, and its audit record.
"""

from __future__ import annotations

from . import consequences
from .dashboard import DEFAULT_WINDOW as dashboard_window
from .dashboard import WINDOWS as DASHBOARD_WINDOWS
from .dashboard import Dashboard, dashboard
from .health import PARKED_SHOWN, STRANDED_SHOWN, HealthReport, replica_health
from .inspection import (
    ScheduleReport,
    find_occurrence,
    find_schedule,
    inspect_occurrence,
    inspect_schedule,
    visible_schedules,
    with_recovery_points,
)
from .listing import LIST_CAP, Standing, list_schedules, schedule_standing
from .metrics import (
    DUE_COUNT_CAP,
    DURATION_BUCKETS,
    LATENESS_BUCKETS,
    Buckets,
    FleetMetrics,
    QueueFigures,
    fleet_metrics,
)
from .operator import DISABLED_FIELDS, cancel, disable, enable, purge, run_now
from .replays import replay, replay_at
from .schedules import PARKED_FIELDS, TIMING_FIELDS, upsert_schedule
from .stranded import Stranded, stranded_schedules
from .summary import ScheduleSummary, schedule_summary
from .sync import SyncReport, fingerprint, sync_if_changed, sync_schedules
from .tenants import TENANT_PAUSE, pause_tenant, resume_tenant
from .timeline import now
from .watch import FailureLine, RunningLine, Watch, watch

__all__ = [
    "DASHBOARD_WINDOWS",
    "DISABLED_FIELDS",
    "DUE_COUNT_CAP",
    "DURATION_BUCKETS",
    "LATENESS_BUCKETS",
    "LIST_CAP",
    "PARKED_FIELDS",
    "PARKED_SHOWN",
    "STRANDED_SHOWN",
    "TENANT_PAUSE",
    "TIMING_FIELDS",
    "Buckets",
    "Dashboard",
    "FailureLine",
    "FleetMetrics",
    "HealthReport",
    "QueueFigures",
    "RunningLine",
    "ScheduleReport",
    "ScheduleSummary",
    "Standing",
    "Stranded",
    "SyncReport",
    "Watch",
    "cancel",
    "consequences",
    "dashboard",
    "dashboard_window",
    "disable",
    "enable",
    "find_occurrence",
    "find_schedule",
    "fingerprint",
    "fleet_metrics",
    "inspect_occurrence",
    "inspect_schedule",
    "list_schedules",
    "now",
    "pause_tenant",
    "purge",
    "replay",
    "replay_at",
    "replica_health",
    "resume_tenant",
    "run_now",
    "schedule_standing",
    "schedule_summary",
    "stranded_schedules",
    "sync_if_changed",
    "sync_schedules",
    "upsert_schedule",
    "visible_schedules",
    "watch",
    "with_recovery_points",
]
