"""Claiming due occurrences for the replica's free run threads, and ahead of them while runs
are short."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
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


class Queue(NamedTuple):
    """A queue a replica serves (``runworker --queue NAME[:N]``), with its run threads."""

    name: str
    concurrency: int


class Claims:
    """Claims as many due occurrences as the replica has room for, and starts them.

    Without ``queues`` the replica serves every queue with ``concurrency`` run threads; with
    them, each queue with its own threads (their sum is the replica's concurrency), claimed
    one queue at a time over its range of the queue index. A queue limited fleet-wide
    (``DJANGO_JOBS["QUEUES"]``) is always claimed on its own, under its lock
    (``store.claim_runs(max_running=)``), and never ahead of a free thread: an occurrence
    claimed ahead would hold one of its few slots while it waits.
    """

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
        queues: Sequence[Queue] = (),
    ) -> None:
        self.replica_id, self.tenant, self.concurrency = replica_id, tenant, concurrency
        self.settings, self.inflight, self.threads = settings, inflight, threads
        self.stopping = stopping
        self.queues = tuple(queues)
        # Whether the last pass found a limited queue at its limit: the loop then looks for
        # its work again after a short wait, not at once (``full_wait``).
        self.full = False

    def claim(self, now: datetime) -> StepResult:
        """Claim up to the free slots (run threads, plus those ahead) and start each run."""
        paused = get_settings()  # the kill switch and the queue limits: read at every pass
        if self.stopping.is_set() or paused.paused_all:
            return NOTHING
        limits = paused.max_running
        self.full = False
        steps: list[StepResult] = []
        if not self.queues:
            # Every queue but the limited ones, then each limited queue on its own (under its
            # lock), all sharing the replica's threads.
            parts: list[tuple[str | None, list[str], int | None]] = [(None, sorted(limits), None)]
            parts += [(name, [], limits[name]) for name in sorted(limits)]
            for queue, others, max_running in parts:
                steps.append(
                    self._claim_one(
                        now,
                        paused,
                        running=self.inflight.count(RunState.CLAIMED, RunState.RUNNING),
                        concurrency=self.concurrency,
                        queue=queue,
                        others=others,
                        max_running=max_running,
                    )
                )
        else:
            by_queue = Counter(
                run.lease.queue
                for run in self.inflight.in_state(RunState.CLAIMED, RunState.RUNNING)
            )
            for served in self.queues:
                steps.append(
                    self._claim_one(
                        now,
                        paused,
                        running=by_queue[served.name],
                        concurrency=served.concurrency,
                        queue=served.name,
                        max_running=limits.get(served.name),
                        ahead=0,
                    )
                )
        return StepResult(sum(s.claimed for s in steps), sum(s.asked for s in steps))

    def _claim_one(
        self,
        now: datetime,
        paused: JobsSettings,
        *,
        running: int,
        concurrency: int,
        queue: str | None = None,
        others: Sequence[str] = (),
        max_running: int | None = None,
        ahead: int | None = None,
    ) -> StepResult:
        """One claim: of ``queue`` (or every queue but ``others``), for ``concurrency``
        threads of which ``running`` are taken."""
        if ahead is None:
            ahead = 0 if max_running is not None else self.ahead()
        if ahead and running > concurrency:
            # Every thread is busy and work claimed ahead still waits: claim again when a
            # thread may go idle, then a full batch, not one occurrence per finished run.
            return NOTHING
        free = concurrency + ahead - running
        if free <= 0:
            return NOTHING
        asked = min(free, self.settings.CLAIM_BATCH_SIZE)
        start_now = max(0, concurrency - running)  # the rest wait for a thread
        claimed = store.claim_runs(
            owner=self.replica_id,
            now=now,
            lease_for=self.settings.lease,
            limit=asked,
            tenant=self.tenant,
            exclude_keys=paused.PAUSED_SCHEDULES,
            start_now=start_now,
            queue=queue,
            other_queues=others,
            max_running=max_running,
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
        took = len(claimed.runs) + ended
        if max_running is not None and took < asked:
            self.full = True  # at its limit (or nothing more due): look again shortly
        return StepResult(took, asked)

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


__all__ = ["NOTHING", "Claims", "Queue", "StepResult"]
