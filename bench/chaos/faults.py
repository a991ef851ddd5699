"""The fault injector: which fault, on which replica, for how long, all drawn from one seeded
generator, so a seed replays the same sequence of faults (their wall-clock instants differ).

Some kinds come in variants (a hostile row's shape, the statement a statement fault fails):
until every variant has been injected once, two faults in three are such owed variants, kind
after kind in turn, so that even a short campaign meets each of them early."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..postgres import Database
from . import oneoffs, poisons, statements
from .app.beats import SUFFIX
from .declare import declare
from .hostile import SHAPES, Intruder
from .replicas import Slot, wait_for

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
    "statement_error",
    "late_one_off",
    "poison",
    "hang",
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
    "statement_error": 3,
    "late_one_off": 1,
    "poison": 1,
    "hang": 1,
}
# The kinds with variants owed until each has been injected once, in the order they take
# turns (``Injector._draw``).
OWED = ("hostile_row", "statement_error", "late_one_off", "poison", "hang")
# How long a fault that declares one-offs waits for the fleet at most (to decide them, or to
# start the hang's run).
WAIT_S = 30.0
# A hang fault without a server to stop severs its replica's connections this often, for
# this long, instead: an outage as the replica sees it.
CUT_EVERY_S, CUT_FOR_S = 0.5, 6.0


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
        env: dict[str, str] | None = None,
        beats: Path | None = None,
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
        self.env = env or {}
        self.beats = beats
        self.declared = 0  # one-off faults so far: each names its schedules by its number
        statement_kinds = list(statements.KINDS)
        rng.shuffle(statement_kinds)
        self.owed: dict[str, list[str]] = {
            "hostile_row": self.intruder.owed,  # the intruder pops its shapes itself
            "statement_error": statement_kinds,
            "late_one_off": ["pair"],
            "poison": ["each"],
            "hang": ["hang"],
        }
        self._turn = 0

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
        """A kind, by weight; but while some variant is owed (the module docstring), two
        faults in three are owed ones, the kinds that owe one taking turns."""
        owing = [k for k in OWED if self.owed[k] and k in self._kinds]
        if owing and len(self.faults) % 3 != 0:
            self._turn += 1
            return owing[self._turn % len(owing)]
        return self.rng.choices(self._kinds, self._weights)[0]

    def _owed(self, kind: str) -> str | None:
        return self.owed[kind].pop() if self.owed[kind] else None

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

    def _statement_error(self, slot: Slot) -> Fault:
        """Fail the next 1-3 statements of one kind the replicas issue (``statements``) with
        an error that is not an outage; disarmed once they have failed, or after
        ``statements.ARMED_AT_MOST_S``."""
        kind = self._owed("statement_error") or self.rng.choice(statements.KINDS)
        sqlstate = self.rng.choices(statements.SQLSTATES, statements.SQLSTATE_WEIGHTS)[0]
        budget = self.rng.randint(1, 3)
        at = datetime.now(UTC)
        statements.arm(self.db, kind, sqlstate=sqlstate, budget=budget)
        deadline = time.monotonic() + statements.ARMED_AT_MOST_S
        while time.monotonic() < deadline and statements.hits(self.db, kind) < budget:
            time.sleep(0.1)
        statements.disarm(self.db, kind)
        hits = statements.hits(self.db, kind)
        detail = {"statement": kind, "sqlstate": sqlstate, "budget": budget}
        detail |= {"raised": min(hits, budget), "let_through": max(hits - budget, 0)}
        return Fault("statement_error", "", at, (datetime.now(UTC) - at).total_seconds(), detail)

    def _late_one_off(self, slot: Slot) -> Fault:
        """Declare, through the service layer, a one-off whose instant has passed within its
        max_delay and one past it (``oneoffs``); wait for the fleet to decide both."""
        self._owed("late_one_off")
        self.declared += 1
        at = datetime.now(UTC)
        written = declare(self.env, oneoffs.specs(self.rng, self.declared))
        decided = self._waited(lambda: all(oneoffs.decided(self.db, s) for s in written))
        detail = {"one_offs": written, "decided_within_wait": decided}
        return Fault("late_one_off", "", at, (datetime.now(UTC) - at).total_seconds(), detail)

    def _poison(self, slot: Slot) -> Fault:
        """Declare one one-off of each poison (``poisons``): a query of death, ``sys.exit``,
        ``KeyboardInterrupt``, each due 1.5 s later with two attempts."""
        self._owed("poison")
        self.declared += 1
        at = datetime.now(UTC)
        written = declare(self.env, poisons.poison_specs(self.declared))
        detail = {"one_offs": written}
        return Fault("poison", "", at, (datetime.now(UTC) - at).total_seconds(), detail)

    def _hang(self, slot: Slot) -> Fault:
        """Declare a run that ignores its 2-second timeout (``poisons.hang_spec``), and once
        it beats, take the store away: stop PostgreSQL for an outage's length, or, on a server
        that is not the campaign's to stop, sever its replica's connections again and again.
        The worker must cut the run off in time all the same."""
        self._owed("hang")
        self.declared += 1
        at = datetime.now(UTC)
        (spec,) = declare(self.env, [poisons.hang_spec(self.declared)])
        detail: dict[str, Any] = {"one_offs": [spec]}
        running = self._first_beat(spec["schedule_id"])
        if running is None:
            detail["started_within_wait"] = False
            return Fault("hang", "", at, (datetime.now(UTC) - at).total_seconds(), detail)
        detail |= {"started_within_wait": True, "replica": running[0], "occurrence": running[1]}
        if self.db.restartable:
            seconds = self.rng.uniform(*self.outage)
            detail["outage_from"] = datetime.now(UTC).isoformat()
            self.db.stop()
            self._hold(seconds)
            self.db.start()
            detail["outage_to"] = datetime.now(UTC).isoformat()
        else:
            detail["cut_from"] = datetime.now(UTC).isoformat()
            ends = time.monotonic() + CUT_FOR_S
            while time.monotonic() < ends:
                self.db.terminate_backends(f"chaos-{running[0]}")
                self._hold(CUT_EVERY_S)
            detail["cut_to"] = datetime.now(UTC).isoformat()
        return Fault("hang", running[0], at, (datetime.now(UTC) - at).total_seconds(), detail)

    def _first_beat(self, schedule_id: int) -> tuple[str, str] | None:
        """The replica life and occurrence of the first run of ``schedule_id`` to beat,
        waiting ``WAIT_S`` at most."""
        found: list[tuple[str, str]] = []

        def beating() -> bool:
            rows = self.db.rows(
                "SELECT id::text FROM django_jobs_occurrence WHERE schedule_id = %s",
                [schedule_id],
            )
            for (oid,) in rows:
                for path in self.beats.glob(f"*{SUFFIX}") if self.beats else []:
                    if oid in _tail(path):
                        found.append((path.name.removesuffix(SUFFIX), oid))
                        return True
            return False

        self._waited(beating, every=0.1)
        return found[0] if found else None

    def _waited(self, condition: Callable[[], bool], *, every: float = 0.5) -> bool:
        try:
            wait_for(condition, timeout=WAIT_S, what="", every=every)
        except TimeoutError:
            return False
        return True


def _tail(path: Path, size: int = 65_536) -> str:
    """The end of a beat file: the latest beats."""
    with path.open("rb") as f:
        f.seek(max(f.seek(0, 2) - size, 0))
        return f.read().decode(errors="replace")
