"""The values the store hands to and takes from its callers: planned occurrences, leases, claims,
write results.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ..identity import occurrence_id
from ..models import Schedule, SkipReason, Trigger

if TYPE_CHECKING:
    from ..scheduling.planner import PlanDecision


@dataclass(frozen=True)
class PlannedOccurrence:
    """An occurrence to plan. With a ``skip_reason`` it is recorded as skipped, never run."""

    schedule_id: int
    tenant: str
    schedule_key: str
    scheduled_at: datetime
    skip_reason: SkipReason | None = None
    trigger: Trigger = Trigger.SCHEDULE
    # The arguments it runs with (checked by the caller: ``validation.arguments``); ``None``:
    # its schedule's, read by the insert itself, as they are when it is planned.
    args: dict[str, Any] | None = field(default=None, hash=False, compare=False)

    @property
    def id(self) -> UUID:
        return occurrence_id(self.tenant, self.schedule_key, self.scheduled_at)


def planned_occurrences(schedule: Schedule, decision: PlanDecision) -> list[PlannedOccurrence]:
    """The occurrences a plan decision inserts for ``schedule``: to run on time, replayed
    (``catchup``), and recorded as skipped with their reason."""

    def occurrence(
        instant: datetime, reason: str | None = None, trigger: Trigger = Trigger.SCHEDULE
    ) -> PlannedOccurrence:
        return PlannedOccurrence(
            schedule_id=schedule.pk,
            tenant=schedule.tenant,
            schedule_key=schedule.key,
            scheduled_at=instant,
            skip_reason=SkipReason(reason) if reason else None,
            trigger=trigger,
        )

    return (
        [occurrence(i) for i in decision.run]
        + [occurrence(i, trigger=Trigger.CATCHUP) for i in decision.replay]
        + [occurrence(i, r) for i, r in decision.skip]
    )


@dataclass(frozen=True)
class Lease:
    """A worker's claim on one occurrence: valid while ``token`` is the occurrence's current one."""

    occurrence_id: UUID
    token: int
    owner: str
    expires_at: datetime
    schedule_id: int
    tenant: str
    scheduled_at: datetime
    attempt: int
    trigger: str
    failures: int = 0  # failed attempts before this one
    # The occurrence's arguments (``Run.args``): never logged.
    args: dict[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)
    queue: str = "default"  # the occurrence's queue (``Occurrence.queue``)


@dataclass(frozen=True)
class Ended:
    """An occurrence a store statement ended, or took over, that no caller's run stands for:
    what the alerts say of it (``signals.OccurrenceEvent``), read by the statement itself."""

    occurrence_id: UUID
    schedule_id: int
    tenant: str  # the schedule's
    key: str
    job: str
    scheduled_at: datetime
    attempt: int
    why: str  # a skip reason, an error type (dead), or the holder a takeover took it from
    error: str = ""  # the stored error (dead)


@dataclass
class Claimed:
    """What one claim took: runs to start, occurrences a lost attempt dead-lettered, forged
    ones it refused, and planned runs of overlap ``skip`` schedules it skipped."""

    runs: list[tuple[Lease, Schedule]] = field(default_factory=list)
    dead: list[UUID] = field(default_factory=list)
    # Occurrences whose tenant is not their schedule's: refused (dead, ``TenantMismatch``).
    forged: list[UUID] = field(default_factory=list)
    # Due while another occurrence of their (overlap ``skip``) schedule was processing.
    overlapped: list[UUID] = field(default_factory=list)
    # Enqueued work that could not start within its job's ``max_delay``.
    late: list[UUID] = field(default_factory=list)
    # All of the above, for the alerts: ``why`` is the error type (dead, forged) or the skip
    # reason (overlapped, late).
    ended: list[Ended] = field(default_factory=list)
    # Runs whose lapsed lease, with its attempt started, the claim took over: ``why`` is the
    # replica that held it.
    taken_over: list[Ended] = field(default_factory=list)

    def __iter__(self) -> Iterator[tuple[Lease, Schedule]]:
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)


@dataclass(frozen=True)
class WriteResult:
    """Which leases a fenced write applied to, and which it refused as stale."""

    accepted: frozenset[UUID]
    refused: frozenset[UUID]


def _lease_arrays(leases: Sequence[Lease]) -> dict[str, list[Any]]:
    """The identities and tokens of ``leases`` as the parallel arrays a fenced statement
    unnests."""
    return {
        "ids": [lease.occurrence_id for lease in leases],
        "tokens": [lease.token for lease in leases],
    }


def _lease_one(lease: Lease) -> dict[str, Any]:
    """The identity and token of one lease, for the fenced statement of one."""
    return {"id": lease.occurrence_id, "token": lease.token}
