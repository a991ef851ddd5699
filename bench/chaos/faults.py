"""The fault injector: which fault, on which replica, for how long, all drawn from one seeded
generator, so a seed replays the same sequence of faults (their wall-clock instants differ)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..postgres import Database
from .hostile import SHAPES, Intruder
from .replicas import Slot

if TYPE_CHECKING:
    from ..ha import HAPair

KINDS = (
    "sigkill",
    "sigstop",
    "sigterm",
    "terminate_backends",
    "pg_restart",
    "clock_skew",
    "hostile_row",
    "failover",
)
WEIGHTS: dict[str, float] = {
    "sigkill": 3,
    "sigstop": 2,
    "sigterm": 2,
    "terminate_backends": 2,
    "pg_restart": 1,
    "clock_skew": 1,
    "hostile_row": 2,
    # Only with --ha (in place of pg_restart): about 12 failovers in 30 minutes.
    "failover": 0.7,
}


@dataclass
class Fault:
    kind: str
    replica: str  # the incarnation hit ("" for the server)
    at: datetime
    seconds: float = 0.0  # how long it lasted (stopped, down, outage)
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "at": self.at.isoformat()}


class Injector:
    def __init__(
        self,
        rng: random.Random,
        db: Database,
        slots: list[Slot],
        *,
        lease_seconds: float,
        outage: tuple[float, float],
        log: Callable[[str], None],
        hostile_shapes: tuple[str, ...] = SHAPES,
        pair: HAPair | None = None,
        failover_weight: float = WEIGHTS["failover"],
    ) -> None:
        self.rng = rng
        self.db = db
        self.slots = slots
        self.lease_seconds = lease_seconds
        self.outage = outage
        self.log = log
        self.faults: list[Fault] = []
        self.pair = pair
        kinds = [
            k
            for k in KINDS
            if (k != "pg_restart" or db.restartable) and (k != "failover" or pair is not None)
        ]
        self._kinds = kinds
        self._weights = [failover_weight if k == "failover" else WEIGHTS[k] for k in kinds]
        self.intruder = Intruder(rng, db, hostile_shapes)

    def next(self) -> Fault:
        kind = self._draw()
        slot = self.rng.choice(self.slots)
        inject: Callable[[Slot], Fault] = getattr(self, f"_{kind}")
        fault = inject(slot)
        self.faults.append(fault)
        self.log(
            f"fault {len(self.faults):>3} {fault.kind:<18} {fault.replica or 'server':<8}"
            f" {fault.seconds:5.1f} s {fault.detail or ''}"
        )
        return fault

    def _draw(self) -> str:
        """A kind, by weight; but while some hostile shape has not been written yet, every
        other fault writes one, so that even a short campaign meets each shape early."""
        if self.intruder.owed and len(self.faults) % 2 == 1:
            return "hostile_row"
        return self.rng.choices(self._kinds, self._weights)[0]

    def _hold(self, seconds: float) -> None:
        """The fault's duration is real time passing: the harness waits it out."""
        time.sleep(seconds)

    def _restart(self, slot: Slot, skew: float = 0.0) -> None:
        slot.start(skew_seconds=skew)

    def _sigkill(self, slot: Slot) -> Fault:
        down = self.rng.uniform(0.5, 3.0)
        victim, at = slot.kill()
        self._hold(down)
        self._restart(slot, slot.current.skew_seconds)
        return Fault("sigkill", victim, at, down)

    def _sigstop(self, slot: Slot) -> Fault:
        stopped = self.lease_seconds + self.rng.uniform(1.0, 4.0)
        victim, at = slot.pause()
        self._hold(stopped)
        slot.resume()
        return Fault("sigstop", victim, at, stopped)

    def _sigterm(self, slot: Slot) -> Fault:
        slot.wait_booted()
        at = datetime.now(UTC)
        victim, code = slot.terminate()
        down = self.rng.uniform(0.5, 2.0)
        self._hold(down)
        self._restart(slot, slot.current.skew_seconds)
        return Fault("sigterm", victim, at, down, {"exit_code": code})

    def _terminate_backends(self, slot: Slot) -> Fault:
        victim = slot.current.name
        at = datetime.now(UTC)
        killed = self.db.terminate_backends(f"chaos-{victim}")
        return Fault("terminate_backends", victim, at, 0.0, {"connections": killed})

    def _pg_restart(self, slot: Slot) -> Fault:
        """PostgreSQL down for a while; half the time a replica also dies and is restarted
        while the server is still down (a worker must start into an outage and wait)."""
        seconds = self.rng.uniform(*self.outage)
        restart_in_outage = self.rng.random() < 0.5
        at = datetime.now(UTC)
        self.db.stop()
        detail: dict[str, Any] = {}
        if restart_in_outage:
            detail["restarted_during_outage"], _ = slot.kill()
            self._hold(min(1.0, seconds / 2))
            self._restart(slot, slot.current.skew_seconds)
            self._hold(seconds - min(1.0, seconds / 2))
        else:
            self._hold(seconds)
        self.db.start()
        return Fault("pg_restart", "", at, (datetime.now(UTC) - at).total_seconds(), detail)

    def _clock_skew(self, slot: Slot) -> Fault:
        """Restart a replica whose host clock is off by one to five seconds either way."""
        slot.wait_booted()
        skew = round(self.rng.choice((-1, 1)) * self.rng.uniform(1.0, 5.0), 3)
        at = datetime.now(UTC)
        victim, _ = slot.terminate()
        self._restart(slot, skew)
        return Fault("clock_skew", victim, at, 0.0, {"skew_seconds": skew})

    def _hostile_row(self, slot: Slot) -> Fault:
        """A row written behind the service layer's back (``hostile``): no replica is hit,
        the fleet meets the row. Lasts as long as the write waits for the fleet's first
        look at it."""
        at = datetime.now(UTC)
        detail = self.intruder.write()
        return Fault("hostile_row", "", at, (datetime.now(UTC) - at).total_seconds(), detail)

    def _failover(self, slot: Slot) -> Fault:
        """Stall replication, kill the primary, promote the standby, rebuild a standby
        (``failover.inject``)."""
        from .failover import inject

        assert self.pair is not None
        return inject(self.pair, self.db, self.slots, self.rng)
