"""Claiming due occurrences for the replica's free run threads, and ahead of them while runs
are short."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import NamedTuple

import structlog

from .. import store
from ..conf import JobsSettings, get_settings
from .alerts import send_claimed
from .inflight import InFlight, RunState
from .threads import RunThreads

log = structlog.get_logger("django_jobs.worker")


class StepResult(NamedTuple):
    """What one claim took: a full batch (``claimed == asked``) means more may be due at once."""

    # Occurrences the claim took, counting the dead, refused and skipped ones it ended.
    claimed: int
    asked: int  # the batch asked for; 0: none (no free slot, stopping, or paused)


NOTHING = StepResult(claimed=0, asked=0)


class Claims:
    """Claims as many due occurrences as the replica has room for, and starts them."""

    def __init__(
        self,
        *,
        replica_id: str,
        tenant: str | None,
        concurrency: int,
        settings: JobsSettings,
        inflight: InFlight,
        threads: RunThreads,
        stopping: threading.Event,
    ) -> None:
        self.replica_id, self.tenant, self.concurrency = replica_id, tenant, concurrency
        self.settings, self.inflight, self.threads = settings, inflight, threads
        self.stopping = stopping

    def claim(self, now: datetime) -> StepResult:
        """Claim up to the free slots (run threads, plus those ahead) and start each run."""
        running = self.inflight.count(RunState.CLAIMED, RunState.RUNNING)
        ahead = self.ahead()
        if ahead and running > self.concurrency:
            # Every thread is busy and work claimed ahead still waits: claim again when a
            # thread may go idle, then a full batch, not one occurrence per finished run.
            return NOTHING
        free = self.concurrency + ahead - running
        paused = get_settings()  # the kill switch is read afresh at every pass
        if free <= 0 or self.stopping.is_set() or paused.paused_all:
            return NOTHING
        asked = min(free, self.settings.CLAIM_BATCH_SIZE)
        start_now = max(0, self.concurrency - running)  # the rest wait for a thread
        claimed = store.claim_runs(
            owner=self.replica_id,
            now=now,
            lease_for=self.settings.lease,
            limit=asked,
            tenant=self.tenant,
            exclude_keys=paused.PAUSED_SCHEDULES,
            start_now=start_now,
        )
        for occurrence in claimed.dead:
            log.error("occurrence.dead", occurrence=str(occurrence), error_type=store.WORKER_LOST)
        for occurrence in claimed.forged:
            log.error(
                "occurrence.refused", occurrence=str(occurrence), error_type=store.TENANT_MISMATCH
            )
        for occurrence in claimed.overlapped:
            log.info("occurrence.skipped", occurrence=str(occurrence), reason="overlap")
        for occurrence in claimed.late:
            log.warning("occurrence.skipped", occurrence=str(occurrence), reason="misfire")
        send_claimed(claimed, replica=self.replica_id)
        for n, (lease, schedule) in enumerate(claimed.runs):
            self.threads.start(lease, schedule, now, ahead=n >= start_now)
        ended = len(claimed.dead) + len(claimed.forged) + len(claimed.overlapped)
        ended += len(claimed.late)
        return StepResult(len(claimed.runs) + ended, asked)

    def ahead(self) -> int:
        """How many occurrences to claim beyond the free run threads.

        Claiming ahead turns a burst of short runs into a few large claims instead of one
        small claim per finished run. It is done only while recent runs are short (under
        ``threads.SHORT_RUN`` on average), so a replica busy with long jobs never holds
        occurrences that another replica could start.
        """
        if self.threads.inline:
            return 0
        return self.settings.CLAIM_AHEAD if self.threads.times.short() else 0


__all__ = ["NOTHING", "Claims", "StepResult"]
