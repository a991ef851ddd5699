"""How a run ends, in each of the four vocabularies that name it, and how they map: one table.

- ``CancelReason`` (``worker/inflight.py``): why the worker asked a running handler to stop
  (its timeout, a lost lease, a store outage, shutdown); ``None`` when nobody did.
- ``Outcome`` (here): what the worker counts for the run (``PassSummary``, ``run_due``), as
  the run thread, the completer or the loop hands it back.
- ``AttemptOutcome`` (``models``): what the run's Attempt row records.
- ``OccurrenceState`` (``models``): where the occurrence stands after that write.

The worker decides the first two; the store writes the other two, fenced by the run's token.
What each counted outcome leaves in the store (any write the fence refuses records the Attempt
``fenced_out``, leaves the occurrence to its new holder, and counts ``lease_lost``):

    Outcome      Attempt                  Occurrence
    completed    succeeded                completed
    retry        failed                   failed, due again at the retry instant
    timed_out    timed_out                failed, due again at the retry instant [1]
    dead         failed, or timed_out     dead
    released     released, or unstarted   scheduled (failed, if it was a retry), due now
    outage       outage                   scheduled (failed, if it was a retry), due now; or,
                                          excused after another claim took it, as that claim
                                          left it [2]
    lease_lost   fenced_out (a refused    as its new holder has it
                 write); or none, and the
                 next claim records it
                 lease_lost
    unwritten    none: the lease expires  processing until the lease expires, then claimable
                 and the next claim       again (a lost attempt, counted as a failure)
                 records it lease_lost
    handed_over  the completer writes it, and counts completed, lease_lost or outage

[1] A timed-out attempt counts ``timed_out`` whatever became of its write (``counted_retry``),
    and a run cut off after its timeout counts ``timed_out`` even when that attempt was its
    last and dead-lettered it (``counted_cut_off``).
[2] ``store.excuse_outage``: the lost attempt is recorded ``outage`` and its failure given back.
"""

from __future__ import annotations

import enum
import threading
from collections import Counter
from dataclasses import dataclass, field

from ..models import AttemptOutcome
from .inflight import CancelReason


class Outcome(enum.StrEnum):
    COMPLETED = "completed"
    RETRY = "retry"
    DEAD = "dead"
    LEASE_LOST = "lease_lost"
    RELEASED = "released"
    TIMED_OUT = "timed_out"
    OUTAGE = "outage"  # the store was out of reach: given back, no failure counted
    UNWRITTEN = "unwritten"  # the worker stopped before the store took the outcome
    HANDED_OVER = "handed_over"  # the completion is written by the completer (group commit)


# A write the fence refused: another claim holds the occurrence now (the store records the
# attempt ``fenced_out``). For the worker, that is a lost lease.
REFUSED = Outcome.LEASE_LOST

# A lost attempt excused after an outage (``store.excuse_outage``): not a failure.
EXCUSED = Outcome.OUTAGE


class GiveBack(enum.Enum):
    """Why an unfinished occurrence is given back: due again at once, no failure counted. Each
    value is what its Attempt records."""

    SHUTDOWN = AttemptOutcome.RELEASED  # the handler stopped for the replica's shutdown
    UNSTARTED = AttemptOutcome.UNSTARTED  # claimed ahead, cancelled before a thread started it
    OUTAGE = AttemptOutcome.OUTAGE  # the store could not be reached while it ran

    @property
    def attempt(self) -> AttemptOutcome:
        return AttemptOutcome(self.value)

    @property
    def counted(self) -> Outcome:
        """What the worker counts once the store took the give-back."""
        return Outcome.OUTAGE if self is GiveBack.OUTAGE else Outcome.RELEASED


def ended_by_outage(reason: CancelReason | None) -> bool:
    """Whether a run was stopped because the store could not be reached to confirm its lease.

    Such a run is never charged to the job: it is given back (``GiveBack.OUTAGE``), or, if
    another claim took its lapsed lease over meanwhile, its lost attempt is excused.
    """
    return reason == CancelReason.OUTAGE


def failed_attempt(reason: CancelReason | None) -> AttemptOutcome:
    """What the Attempt of a failed run records: ``timed_out`` when the worker had cancelled it
    for its timeout, ``failed`` otherwise (it failed on its own)."""
    return AttemptOutcome.TIMED_OUT if reason == CancelReason.TIMEOUT else AttemptOutcome.FAILED


def counted_retry(attempt: AttemptOutcome, written: Outcome) -> Outcome:
    """What the worker counts for a failed attempt it wrote a retry for: ``timed_out`` for a
    timed-out attempt, whatever became of the write (accepted, refused by the fence,
    unwritten), so a pass's summary tells timeouts from errors; otherwise what the write gave."""
    return Outcome.TIMED_OUT if attempt == AttemptOutcome.TIMED_OUT else written


def counted_cut_off(reason: CancelReason | None) -> Outcome:
    """What the loop counts for a run it cut off (its handler ignored the cancellation past the
    grace), unless an outage stopped it (that run counts what its give-back wrote):
    ``timed_out`` after its timeout, even if that attempt dead-lettered it; ``lease_lost``
    otherwise (nothing is written: another claim holds it)."""
    return Outcome.TIMED_OUT if reason == CancelReason.TIMEOUT else Outcome.LEASE_LOST


class Tally:
    """The outcomes this replica counted, by name. Run threads, the completer and the loop
    add to it (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, outcome: Outcome) -> None:
        with self._lock:
            self._counts[outcome.value] += 1

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self._counts)


@dataclass
class PassSummary:
    """What one ``Worker.run_pass`` did: how many occurrences it claimed, and how they ended."""

    claimed: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)

    def __str__(self) -> str:
        parts = [f"claimed {self.claimed}"]
        parts += [f"{name} {self.outcomes[name]}" for name in sorted(self.outcomes)]
        return ", ".join(parts)


__all__ = [
    "EXCUSED",
    "REFUSED",
    "GiveBack",
    "Outcome",
    "PassSummary",
    "Tally",
    "counted_cut_off",
    "counted_retry",
    "ended_by_outage",
    "failed_attempt",
]
