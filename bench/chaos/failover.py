"""The campaign on a highly available PostgreSQL (``--ha sync|async``, issue #20): a primary and
a streaming standby (``bench.ha.HAPair``), the ``failover`` fault, and what must hold across
failovers.

The fault stalls replication for 0-3 s, then SIGKILLs the primary, promotes the standby and
rebuilds a new standby (``HAPair.failover``); then it waits for every replica that was up to
claim work on the new primary, without being restarted. Its detail keeps the pair's timings
(and how much WAL the standby had not received), and per replica life its pid, whether the
same process was still running afterwards, and how long it took to claim again.

The checks read the replicas' own logs as the witness of what they were told had committed:
a completion a replica logged (``occurrence.completed``, after its commit returned) must be in
the database with that token, held by that replica. With synchronous replication nothing a
commit acknowledged is lost; with asynchronous replication a failover loses the WAL the
standby had not received, and ``wal_tail_losses`` says what that did, failover by failover.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

from ..postgres import Database
from .faults import Fault
from .history import ATTEMPTS, AttemptRow, Findings, Rows
from .misbehaviour import CRASHER
from .replicas import Incarnation, Slot

if TYPE_CHECKING:
    from ..ha import HAPair

# How long, after a failover, every surviving replica has to claim work on the new primary.
RESUME_TIMEOUT_S = 60.0
# How long after a failover's kill a replica's log lines are still its consequences.
AFTERMATH = timedelta(seconds=5)


class HADatabase(Database):
    """The campaign's ``Database`` on an ``HAPair``: every reader and writer of the campaign
    (replicas, enqueuer, checks, hostile rows) uses the pair's multi-host URL, which finds the
    primary wherever it is. Not ``restartable``: ``pg_restart`` gives way to ``failover``."""

    def __init__(self, pair: HAPair, root: Path, mode: str) -> None:
        super().__init__(pair.url, pgdata=None)
        self.pair = pair
        self.root = root
        self.mode = mode

    def release(self) -> None:
        try:
            self.pair.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def inject(pair: HAPair, db: Rows, slots: list[Slot], rng: random.Random) -> Fault:
    """Stall replication for a while (as a slow network or a busy standby does), fail the
    primary over to the standby, then wait (at most ``RESUME_TIMEOUT_S``) for each replica
    life that was up to start an attempt on the new primary.

    The stall is a SIGSTOP of the primary's WAL sender for 0-3 s before the kill (the kill
    takes it with the primary): with asynchronous replication the primary goes on
    committing and what it wrote meanwhile is lost with it; with synchronous replication its
    commits wait for the standby instead, which the replicas meet as a slow store."""
    before = {
        slot.current.name: slot.process.pid
        for slot in slots
        if slot.alive and slot.process is not None
    }
    stall = round(rng.uniform(0.0, 3.0), 3)
    stalled = _stall_replication(pair.url)
    time.sleep(stall)
    at = datetime.now(UTC)
    timings = pair.failover()
    promoted = datetime.now(UTC)
    waiting = set(before)
    resumed: dict[str, float] = {}
    deadline = time.monotonic() + RESUME_TIMEOUT_S
    while waiting and time.monotonic() < deadline:
        current = {slot.current.name for slot in slots if slot.alive}
        waiting &= current  # a life that ended is not waited for: the check reports it
        for replica, first in _first_claims(db, sorted(waiting), at):
            resumed[replica] = round((first - at).total_seconds(), 3)
            waiting.discard(replica)
        if waiting:
            time.sleep(0.25)
    lives = {slot.current.name: slot for slot in slots}
    replicas = {
        name: {
            "pid": pid,
            "same_process": name in lives
            and lives[name].alive
            and lives[name].process is not None
            and lives[name].process.pid == pid,  # type: ignore[union-attr]
            "resumed_after_s": resumed.get(name),
        }
        for name, pid in before.items()
    }
    detail = {
        **timings,
        "replication_stalled_s": stall if stalled else 0.0,
        "replicas": replicas,
    }
    seconds = (promoted - at).total_seconds()
    return Fault("failover", "", at, seconds, detail)


def _stall_replication(url: str) -> bool:
    """SIGSTOP the primary's WAL senders; whether there was one to stop."""
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        pids = [pid for (pid,) in conn.execute("SELECT pid FROM pg_stat_replication")]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    return bool(pids)


def _first_claims(db: Rows, replicas: list[str], since: datetime) -> list[tuple[str, datetime]]:
    if not replicas:
        return []
    try:
        return [
            (str(replica), first)
            for replica, first in db.rows(
                f"SELECT replica, min(started_at) FROM ({ATTEMPTS}) a"
                " WHERE replica = ANY(%s) AND started_at > %s GROUP BY replica",
                [replicas, since],
            )
        ]
    except psycopg.Error:  # the pair may still be settling: ask again
        return []


def failovers_survived(
    found: Findings, db: Rows, faults: list[Fault], lives: list[Incarnation]
) -> None:
    """Every replica life up at a failover was the same process afterwards and claimed work
    on the new primary. A life that ended meanwhile is explained only by the campaign's own
    misbehaving handlers: the crasher (exit 1, its start sign names the life) or a handler
    that ignored its cancellation during the outage and was cut off (exit 3, ``run.cut_off``
    in the life's log), as in any outage; anything else counts against the failover."""
    by_name = {life.name: life for life in lives}
    crashed = {
        r for (r,) in db.rows("SELECT DISTINCT replica FROM chaos_sign WHERE job = %s", [CRASHER])
    }
    problems, explained, resumed = [], Counter[str](), []
    failovers = [f for f in faults if f.kind == "failover"]
    for n, fault in enumerate(failovers, 1):
        for name, seen in fault.detail.get("replicas", {}).items():
            life = by_name.get(name)
            if seen["same_process"] and seen["resumed_after_s"] is not None:
                resumed.append(seen["resumed_after_s"])
                continue
            if not seen["same_process"] and life is not None:
                if life.exit_code == 1 and name in crashed:
                    explained["crasher"] += 1
                    continue
                if life.exit_code == 3 and any(
                    e.get("event") == "run.cut_off" for e in life.events()
                ):
                    explained["cut_off"] += 1
                    continue
            why = (
                f"exited (code {life.exit_code if life else '?'})"
                if not seen["same_process"]
                else f"did not claim work within {RESUME_TIMEOUT_S:.0f} s"
            )
            problems.append(f"failover {n} at {fault.at:%H:%M:%S}: {name} {why}")
    found.figures["failovers"] = len(failovers)
    found.figures["failover_lives_ended_by_crasher"] = explained["crasher"]
    found.figures["failover_lives_ended_by_cut_off"] = explained["cut_off"]
    found.figures["failover_resumed_p50_s"] = _percentile(resumed, 50)
    found.figures["failover_resumed_max_s"] = max(resumed, default=None)
    for key in (
        "replication_stalled_s",
        "writable_s",
        "standby_s",
        "commit_s",
        "lost_wal_bytes",
        "lost_commits",
    ):
        values = [float(f.detail[key]) for f in failovers if f.detail.get(key) is not None]
        found.figures[f"failover_{key}_p50"] = _percentile(values, 50)
        found.figures[f"failover_{key}_max"] = max(values, default=None)
    found.check("every failover survived without a replica restart", problems)


def _percentile(values: list[float], p: float) -> float | None:
    from .history import percentile

    return percentile(values, p)


def wal_tail_losses(
    found: Findings,
    faults: list[Fault],
    lives: list[Incarnation],
    attempts: dict[Any, list[AttemptRow]],
    states: dict[str, str],
    enqueued_missing: int,
) -> None:
    """What the replicas were told had committed, against what the database holds.

    Each ``(occurrence, token)`` a replica life logged (a claim it ran, a completion it was
    told committed) must be an attempt of that life in the database; each logged completion
    must be a succeeded attempt. When not, the write went with a failover's lost WAL tail,
    and the classification says what it did next:

    - ``token_granted_twice``: the database's attempt with that token belongs to another
      replica: the token was granted on the old primary, lost, and granted again;
    - ``occurrence_lost``: the occurrence itself is gone (an enqueue went with the tail);
    - ``completion_lost_ran_again``: an acknowledged completion is gone and the occurrence
      completed again by another run: it ran twice;
    - ``completion_lost_came_back``: an acknowledged completion is gone and the occurrence is
      back in an unfinished or other final state;
    - ``claim_lost``: a claim a replica ran is gone altogether (no attempt with its token).

    One ``(occurrence, token, replica life)`` is classified once. Each is attributed to a
    failover (``_attribute``), with how long before the primary's SIGKILL it was logged.
    """
    failovers = sorted((f for f in faults if f.kind == "failover"), key=lambda f: f.at)
    held = {(str(oid), row.token): row for oid, rows in attempts.items() for row in rows}
    kinds: Counter[str] = Counter()
    per_failover: dict[int, Counter[str]] = defaultdict(Counter)
    before_kill: list[float] = []
    problems: list[str] = []
    told: dict[tuple[str, int, str], tuple[bool, datetime, str]] = {}
    for life in lives:
        for event in life.events():
            key, token = event.get("occurrence"), event.get("token")
            if key is None or token is None:
                continue
            done = event.get("event") == "occurrence.completed"
            was = told.get((key, token, life.name), (False, datetime.min.replace(tzinfo=UTC), ""))
            at = _stamp(event)
            told[(key, token, life.name)] = (
                was[0] or done,
                at if done or not was[0] else was[1],
                "occurrence.completed" if done or was[0] else str(event.get("event")),
            )
    for (key, token, name), (done, at, what) in sorted(told.items(), key=lambda i: i[1][1]):
        kind = _classify(held.get((key, token)), name, done, states.get(key, "absent"))
        if kind is None:
            continue
        kinds[kind] += 1
        n, gap = _attribute(failovers, at)
        if n is not None:
            per_failover[n][kind] += 1
            before_kill.append(gap)
        when = (
            f"; {abs(gap):.3f} s {'before' if gap >= 0 else 'after'} failover {n}'s kill"
            if n is not None
            else ""
        )
        problems.append(
            f"{kind}: occurrence {key} token {token} ({name}, {what} at {at:%H:%M:%S.%f});"
            f" now {states.get(key, 'absent')}{when}"
        )
    kinds["enqueue_lost"] = enqueued_missing
    found.figures["wal_tail_losses"] = dict(sorted(kinds.items()))
    found.figures["wal_tail_losses_by_failover"] = {
        str(n): {
            **dict(sorted(per_failover[n].items())),
            **{
                k: failovers[n - 1].detail.get(k)
                for k in ("lost_wal_bytes", "lsn_lost_bytes")
                if failovers[n - 1].detail.get(k) is not None
            },
        }
        for n in sorted(per_failover)
    }
    found.figures["wal_tail_loss_before_kill_max_s"] = max(before_kill, default=None)
    found.check("acknowledged writes survive failover", problems)


def _classify(row: AttemptRow | None, replica: str, completed: bool, state: str) -> str | None:
    """What became of a claim (``completed``: and its completion) a replica was told of, with
    ``row`` the database's attempt of that occurrence and token; None when it is there."""
    if state == "absent":
        return "occurrence_lost"  # the row itself went with the WAL tail: an enqueue
    if row is not None and row.replica != replica:
        return "token_granted_twice"
    if completed and (row is None or row.outcome != "succeeded"):
        return "completion_lost_ran_again" if state == "completed" else "completion_lost_came_back"
    return "claim_lost" if row is None else None


def _stamp(event: dict[str, Any]) -> datetime:
    at = datetime.fromisoformat(str(event.get("timestamp")).replace("Z", "+00:00"))
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _attribute(failovers: list[Fault], at: datetime) -> tuple[int | None, float]:
    """The failover a write logged at ``at`` went with: the first whose kill came after it,
    or at most ``AFTERMATH`` before it (a replica logs what it was told during the failover
    too), within ten minutes; and how long after ``at`` the kill was (negative: before)."""
    for n, fault in enumerate(failovers, 1):
        if fault.at >= at - AFTERMATH:
            gap = (fault.at - at).total_seconds()
            return (n, gap) if gap < 600 else (None, 0.0)
    return None, 0.0
