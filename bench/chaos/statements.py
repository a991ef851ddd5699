"""Database errors that are not outages, injected into each kind of statement the worker
issues, inside PostgreSQL, so that real, unmodified ``runworker`` processes meet them.

The campaign installs a fault table and ``BEFORE`` triggers on django_jobs' tables when it
starts (``install``) and removes them at its end (``remove``). A trigger fires on the row
change one kind of statement makes, and only on a replica's session (its
``application_name`` is ``chaos-<life>``: never the runner's, the enqueuer's or a service's
session). While the fault row of its kind is armed, the trigger raises the armed SQLSTATE for
the armed number of statements, then lets them pass. The count lives in a sequence: a raise
rolls back everything its transaction wrote, but not ``nextval``.

What each kind's trigger recognises (django_jobs/store/sql/*.sql says what each statement
writes):

- ``renewal``: an occurrence still ``processing`` under the same fencing token whose
  ``lease_expires_at`` moves (``leases.sql``, ``renew``);
- ``claim``: an occurrence set ``processing`` under a new fencing token (``claims.sql``);
- ``completion``: an occurrence going from ``processing`` to ``completed``, the fenced write
  (``fenced_write.sql``), whether ``run.atomic()`` or the completer writes it;
- ``heartbeat``: any write of the replica table (``replicas.sql``, ``heartbeat`` and
  ``declare_gone``);
- ``plan``: a new occurrence, or a schedule's ``next_due_at`` moved (``planning.sql``,
  ``write_plan``; also a park);
- ``retention``: the retention pass's record (``retention.sql``, ``record_retention``), the
  one statement every pass ends with (the campaign's schedules keep 7 days, so the purge
  itself deletes nothing).

The SQLSTATEs are of errors a store that is up may answer with: ``P0001`` (an error raised
by a trigger or function), ``40001`` (a serialization failure) and ``57014`` (a statement
cancelled: ``statement_timeout``). None of them means the store is out of reach.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..postgres import Database
from .history import AttemptRow, Findings, Rows
from .spans import frozen, overlaps, store_down

if TYPE_CHECKING:
    from .faults import Fault
    from .replicas import Incarnation

KINDS = ("renewal", "claim", "completion", "heartbeat", "plan", "retention")
SQLSTATES = ("P0001", "40001", "57014")
SQLSTATE_WEIGHTS = (2, 1, 1)
# What the injected error's message starts with: the checks tell it from any other error.
MARKER = "chaos: injected"
# How long a fault stays armed at most, waiting for its statements.
ARMED_AT_MOST_S = 10.0
# After a statement fault, how long a replica life has to start a run again.
SERVE_AGAIN_WITHIN = timedelta(seconds=20)

SETUP = """
CREATE TABLE chaos_statement_fault (
    kind text PRIMARY KEY,
    armed boolean NOT NULL DEFAULT false,
    sqlstate text NOT NULL DEFAULT 'P0001',
    budget integer NOT NULL DEFAULT 0,
    hits regclass NOT NULL
);
{sequences}
CREATE FUNCTION chaos_statement_fault() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    f record;
BEGIN
    IF current_setting('application_name') ~ '^chaos-r[0-9]+[.][0-9]+$' THEN
        SELECT * INTO f FROM chaos_statement_fault WHERE kind = TG_ARGV[0] AND armed;
        IF FOUND AND nextval(f.hits) <= f.budget THEN
            RAISE EXCEPTION USING
                ERRCODE = f.sqlstate,
                MESSAGE = format('{marker} %s into a %s statement (%s %s on %s)',
                                 f.sqlstate, TG_ARGV[0], TG_WHEN, TG_OP, TG_TABLE_NAME),
                HINT = 'a fault of the campaign (bench/chaos/statements.py)';
        END IF;
    END IF;
    RETURN COALESCE(NEW, OLD);
END
$$;
CREATE TRIGGER chaos_fault_renewal BEFORE UPDATE ON django_jobs_occurrence FOR EACH ROW
    WHEN (OLD.state = 'processing' AND NEW.state = 'processing'
          AND NEW.fencing_token = OLD.fencing_token
          AND NEW.lease_expires_at IS DISTINCT FROM OLD.lease_expires_at)
    EXECUTE FUNCTION chaos_statement_fault('renewal');
CREATE TRIGGER chaos_fault_claim BEFORE UPDATE ON django_jobs_occurrence FOR EACH ROW
    WHEN (NEW.state = 'processing' AND NEW.fencing_token IS DISTINCT FROM OLD.fencing_token)
    EXECUTE FUNCTION chaos_statement_fault('claim');
CREATE TRIGGER chaos_fault_completion BEFORE UPDATE ON django_jobs_occurrence FOR EACH ROW
    WHEN (OLD.state = 'processing' AND NEW.state = 'completed')
    EXECUTE FUNCTION chaos_statement_fault('completion');
CREATE TRIGGER chaos_fault_heartbeat BEFORE INSERT OR UPDATE ON django_jobs_replica
    FOR EACH ROW EXECUTE FUNCTION chaos_statement_fault('heartbeat');
CREATE TRIGGER chaos_fault_plan BEFORE INSERT ON django_jobs_occurrence
    FOR EACH ROW EXECUTE FUNCTION chaos_statement_fault('plan');
CREATE TRIGGER chaos_fault_plan_next_due BEFORE UPDATE ON django_jobs_schedule FOR EACH ROW
    WHEN (NEW.next_due_at IS DISTINCT FROM OLD.next_due_at)
    EXECUTE FUNCTION chaos_statement_fault('plan');
CREATE TRIGGER chaos_fault_retention BEFORE INSERT OR UPDATE ON django_jobs_retentionstate
    FOR EACH ROW EXECUTE FUNCTION chaos_statement_fault('retention');
"""
TEARDOWN = """
DROP TRIGGER IF EXISTS chaos_fault_renewal ON django_jobs_occurrence;
DROP TRIGGER IF EXISTS chaos_fault_claim ON django_jobs_occurrence;
DROP TRIGGER IF EXISTS chaos_fault_completion ON django_jobs_occurrence;
DROP TRIGGER IF EXISTS chaos_fault_heartbeat ON django_jobs_replica;
DROP TRIGGER IF EXISTS chaos_fault_plan ON django_jobs_occurrence;
DROP TRIGGER IF EXISTS chaos_fault_plan_next_due ON django_jobs_schedule;
DROP TRIGGER IF EXISTS chaos_fault_retention ON django_jobs_retentionstate;
DROP FUNCTION IF EXISTS chaos_statement_fault();
DROP TABLE IF EXISTS chaos_statement_fault;
{sequences}
"""


def _sequence(kind: str) -> str:
    return f"chaos_statement_hits_{kind}"


def install(db: Database) -> None:
    """The fault table, one hit counter per kind, the trigger function and the triggers."""
    sequences = "\n".join(
        f"CREATE SEQUENCE {_sequence(k)};"
        f" INSERT INTO chaos_statement_fault (kind, hits) VALUES ('{k}', '{_sequence(k)}');"
        for k in KINDS
    )
    db.execute(SETUP.format(sequences=sequences, marker=MARKER))


def remove(db: Database) -> None:
    sequences = "\n".join(f"DROP SEQUENCE IF EXISTS {_sequence(k)};" for k in KINDS)
    db.execute(TEARDOWN.format(sequences=sequences))


def arm(db: Database, kind: str, *, sqlstate: str, budget: int) -> None:
    """Fail the next ``budget`` statements of ``kind`` that replicas issue with ``sqlstate``."""
    db.execute(
        "WITH reset AS (SELECT setval(hits, 1, false) FROM chaos_statement_fault"
        " WHERE kind = %(kind)s)"
        " UPDATE chaos_statement_fault SET armed = true, sqlstate = %(state)s,"
        " budget = %(budget)s WHERE kind = %(kind)s AND EXISTS (SELECT 1 FROM reset)",
        {"kind": kind, "state": sqlstate, "budget": budget},
    )


def hits(db: Rows, kind: str) -> int:
    """How many statements of ``kind`` met the armed fault so far (failed or, past the
    budget, let through)."""
    ((last, called),) = db.rows(f"SELECT last_value, is_called FROM {_sequence(kind)}")
    return int(last) if called else 0


def disarm(db: Database, kind: str) -> None:
    db.execute("UPDATE chaos_statement_fault SET armed = false WHERE kind = %s", [kind])


def replicas_keep_serving(
    found: Findings,
    attempts: dict[Any, list[AttemptRow]],
    faults: list[Fault],
    lives: list[Incarnation],
) -> None:
    """After a statement fault, every replica life that was up throughout starts a run again
    within ``SERVE_AGAIN_WITHIN`` of the fault's end: a non-outage error in one of its
    statements neither ends it (*replicas exit only when told* says so of the process) nor
    leaves it half-alive (a dead claim loop, a dead thread).

    A life is not asked when it ended, was frozen (SIGSTOP), or the store was down (a
    PostgreSQL restart, a failover, a ``hang`` fault's outage) in that span: it could not
    have claimed."""
    starts: dict[str, list[datetime]] = {}
    for rows in attempts.values():
        for row in rows:
            starts.setdefault(row.replica, []).append(row.started_at)
    down, stopped = store_down(faults), frozen(faults)
    met = [f for f in faults if f.kind == "statement_error" and f.detail.get("raised")]
    problems, asked = [], 0
    for fault in met:
        since = fault.at + timedelta(seconds=fault.seconds)
        until = since + SERVE_AGAIN_WITHIN
        for life in lives:
            if life.started > fault.at or (life.ended is not None and life.ended < until):
                continue
            if overlaps((since, until), [*down, *stopped.get(life.name, [])]):
                continue
            asked += 1
            if not any(since <= at <= until for at in starts.get(life.name, [])):
                problems.append(
                    f"{life.name}: no run started in the {SERVE_AGAIN_WITHIN.seconds} s after a"
                    f" {fault.detail['statement']} fault ({fault.detail['sqlstate']},"
                    f" {fault.detail['raised']} statement(s) failed) ended at {since:%H:%M:%S}"
                )
    _figures(found, faults, met=len(met), asked=asked)
    found.check("replicas keep serving through non-outage store errors", problems)


def _figures(found: Findings, faults: list[Fault], *, met: int, asked: int) -> None:
    injected = [f for f in faults if f.kind == "statement_error"]
    by_kind = Counter(f.detail["statement"] for f in injected)
    found.figures["statement_faults_by_kind"] = dict(sorted(by_kind.items()))
    found.figures["statement_faults_met"] = met
    found.figures["statement_errors_raised"] = sum(f.detail.get("raised", 0) for f in injected)
    found.figures["lives_asked_to_serve_after_statement_faults"] = asked
