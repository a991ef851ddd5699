"""Hostile rows: schedule and occurrence rows written behind the service layer's back (plain
SQL on the campaign's database), as a manual UPDATE, an older release or a bad migration
writes them, and what must become of each.

The planner checks every schedule row as it reads it and parks one it refuses, naming the
field (the review's every-second rrule, one-offs at the ends of the calendar); it plans a
valid but ancient row, and a year of the densest rule a timing accepts, in bounded passes; a
claim refuses an occurrence whose tenant is not its schedule's. Meanwhile every other
schedule is served: the campaign's other invariants, unchanged, say so.

Every schedule written here has a key under ``hostile.``: the lost-occurrence and lateness
checks leave those out (their timings may not even evaluate) and the checks below take them.
What was written is in each ``hostile_row`` fault's detail.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from django_jobs.identity import occurrence_id
from django_jobs.scheduling.planner import HEAD_WINDOW

from ..postgres import Database
from .history import Findings, Rows
from .replicas import PLAN_AHEAD_SECONDS, Incarnation, wait_for

HOSTILE = "hostile."
# ``store.TENANT_MISMATCH`` (the runner is no Django process: it reads the pure modules only).
TENANT_MISMATCH = "TenantMismatch"
FORGED_TENANT = "intruder"
# Campaign schedules a forged occurrence names: overlap allow, max_delay 5-10 s (claimed well
# within it, so the claim, not the misfire planner, meets it), and none whose deaths another
# check counts (the reader's, the crasher's).
FORGE_ON = ("chaos.tick", "chaos.outside", "chaos.flaky", "chaos.doomed")
# Instants planned by a pass that read a row before it was corrupted are at most that pass's
# "now" plus how far ahead it plans (PLAN_AHEAD_SECONDS), before the UPDATE (which waited for
# the pass's row lock); the rest is clock slack.
SLACK = timedelta(seconds=2)
AHEAD = timedelta(seconds=PLAN_AHEAD_SECONDS)
# An ancient schedule has caught up once it has planned up to this close to the end of the
# faults (it is a per-minute cron).
CAUGHT_UP = timedelta(minutes=2)
WAIT_SECONDS = 30.0  # how long a write waits for the fleet (first pass, refusal) at most

# The shapes, and the field the planner must park each for ("" : a valid row it must plan;
# TENANT_MISMATCH: an occurrence a claim must refuse).
FLOOD = "flood"  # every second, replay_all, max_catchup 2^31-1, created 1970
ANCIENT = "ancient_cron"  # a valid per-minute cron created in 1970
BAD_ZONE = "bad_zone"
BAD_CRON = "bad_cron"
ENDLESS_DELAY = "endless_delay"  # max_delay of two centuries
FAR_FUTURE = "far_future"  # last_scheduled_at in 2990
FORGED = "forged_tenant"
# A max_delay past what Python's timedelta holds: no replica can even load the row (it used
# to stop every replica's plan pass; store.park_unreadable parks it in SQL).
UNREADABLE = "unreadable"
# Issue #33: the densest rrule a timing accepts (once a minute, 1,440 a day) with a year of
# gap, which is planned in bounded passes; the review's every-second rule, refused where a
# timing is parsed, so a row holding it is parked; one-offs at the ends of the calendar.
DENSE_RULE = "dense_rule"
EVERY_SECOND_RULE = "every_second_rule"
ONE_OFF_9999 = "one_off_9999"
ONE_OFF_0001 = "one_off_0001"
EXPECT = {
    FLOOD: "max_catchup",
    ANCIENT: "",
    BAD_ZONE: "timing.zone",
    BAD_CRON: "timing.cron",
    ENDLESS_DELAY: "max_delay",
    FAR_FUTURE: "last_scheduled_at",
    FORGED: TENANT_MISMATCH,
    UNREADABLE: "max_delay",
    DENSE_RULE: "",
    EVERY_SECOND_RULE: "timing.rrule",
    ONE_OFF_9999: "timing.at",
    ONE_OFF_0001: "timing.at",
}
# The valid rows a campaign must see planned up to its end in bounded passes.
CATCHING_UP = (ANCIENT, DENSE_RULE)
ALL_SHAPES = tuple(EXPECT)
SHAPES = ALL_SHAPES

INSERT_SCHEDULE = """
    INSERT INTO django_jobs_schedule (
        tenant, key, job, timing_kind, cron, rrule, run_at, "interval", anchor, time_zone,
        skipped_time,
        repeated_time, zone_reason, max_delay, overlap, misfire, max_catchup,
        idempotency_scope, max_attempts, backoff, max_backoff, timeout, operating_owner,
        record_owner, status, decider, enabled, disabled_by, disabled_reason, origin,
        created_at, updated_at, next_due_at, parked_field, parked_reason
    ) VALUES (
        '', %(key)s, 'chaos.effect', %(timing_kind)s, %(cron)s, %(rrule)s, %(run_at)s,
        %(interval)s, %(anchor)s,
        'UTC', 'shift', 'first', '', %(max_delay)s, 'allow', %(misfire)s, %(max_catchup)s,
        'occurrence', 3, interval '1 second', interval '2 seconds', interval '30 seconds',
        'chaos-intruder', 'nobody@example.com', 'active', '', true, '', '', 'runtime',
        COALESCE(%(created_at)s, clock_timestamp()), clock_timestamp(), clock_timestamp(),
        '', ''
    )
    RETURNING id, clock_timestamp()
"""
EPOCH = datetime.fromisoformat("1970-01-01T00:00:00+00:00")
EVERY_2S = {
    "timing_kind": "interval",
    "cron": "",
    "interval": timedelta(seconds=2),
    "anchor": EPOCH,
}
EVERY_MINUTE = {"timing_kind": "cron", "cron": "* * * * *", "interval": None, "anchor": None}
SIXTY = ",".join(str(n) for n in range(60))
RRULE = {"timing_kind": "rrule", "cron": "", "interval": None, "anchor": None}
ONE_OFF = {"timing_kind": "at", "cron": "", "interval": None, "anchor": None}
# A year of gap for the dense rule: a row created that long ago (computed when written).
YEAR = timedelta(days=365)
# The new rows: the one that once took replicas out of memory (every second since 1970,
# replaying all of it), and a valid per-minute cron of 1970 (56 years of gap, a month a pass).
NEW_ROWS: dict[str, dict[str, Any]] = {
    FLOOD: {
        **EVERY_2S,
        "interval": timedelta(seconds=1),
        "created_at": EPOCH,
        "max_delay": timedelta(seconds=5),
        "misfire": "replay_all",
        "max_catchup": 2**31 - 1,
    },
    ANCIENT: {
        **EVERY_MINUTE,
        "created_at": EPOCH,
        "max_delay": timedelta(seconds=10),
        "misfire": "replay_all",
        "max_catchup": 3,
    },
    DENSE_RULE: {
        **RRULE,
        "rrule": f"FREQ=HOURLY;BYMINUTE={SIXTY}",
        "created_at": YEAR,
        "max_delay": timedelta(seconds=10),
        "misfire": "skip",
        "max_catchup": 3,
    },
    EVERY_SECOND_RULE: {
        **RRULE,
        "rrule": f"FREQ=HOURLY;BYMINUTE={SIXTY};BYSECOND={SIXTY}",
        "created_at": None,
        "max_delay": timedelta(seconds=10),
        "misfire": "skip",
    },
    ONE_OFF_9999: {
        **ONE_OFF,
        "run_at": datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
        "created_at": None,
        "max_delay": timedelta(seconds=10),
        "misfire": "skip",
    },
    ONE_OFF_0001: {
        **ONE_OFF,
        "run_at": datetime(1, 1, 1, tzinfo=UTC),
        "created_at": None,
        "max_delay": timedelta(seconds=10),
        "misfire": "skip",
    },
}
# The corrupted rows: the valid row each starts from (a sacrificial schedule of its own,
# which no other check reads), and the UPDATE that corrupts it. Zone and cron matter only to
# a cron timing, so those start from one.
SACRIFICE = {"created_at": None, "max_delay": timedelta(seconds=30), "misfire": "skip"}
CORRUPT: dict[str, tuple[dict[str, Any], str]] = {
    BAD_ZONE: (EVERY_MINUTE, "SET time_zone = 'Mars/Olympus_Mons'"),
    BAD_CRON: (EVERY_MINUTE, "SET cron = '61 * * * *'"),
    ENDLESS_DELAY: (EVERY_2S, "SET max_delay = interval '200 years'"),
    FAR_FUTURE: (EVERY_2S, "SET last_scheduled_at = '2990-01-01T00:00:00Z'"),
    UNREADABLE: (EVERY_2S, "SET max_delay = interval '100000000 years'"),
}
UPDATE_SCHEDULE = """
    UPDATE django_jobs_schedule {corruption}, updated_at = clock_timestamp()
    WHERE id = %(id)s
    RETURNING clock_timestamp()
"""
INSERT_OCCURRENCE = """
    INSERT INTO django_jobs_occurrence (
        id, schedule_id, tenant, scheduled_at, state, skip_reason, trigger, due_at,
        lease_owner, fencing_token, attempts, failures, last_error_type, last_error_message
    ) VALUES (
        %(id)s, %(schedule)s, %(tenant)s, %(at)s, 'scheduled', '', 'schedule', %(at)s,
        '', 0, 0, 0, '', ''
    )
    RETURNING clock_timestamp()
"""


class Intruder:
    """Writes one hostile row per call, the shape drawn from the campaign's generator: each
    shape once first (in a shuffled order), then any. Returns what it wrote."""

    def __init__(self, rng: random.Random, db: Database, shapes: tuple[str, ...] = SHAPES) -> None:
        self.rng, self.db, self.shapes = rng, db, shapes
        self.owed = list(shapes)
        rng.shuffle(self.owed)
        self.written = 0

    def write(self) -> dict[str, Any]:
        shape = self.owed.pop() if self.owed else self.rng.choice(self.shapes)
        self.written += 1
        key = f"{HOSTILE}{shape}-{self.written}"
        if shape == FORGED:
            detail = self._forge()
        elif shape in CORRUPT:
            detail = self._corrupt(key, *CORRUPT[shape])
        else:
            _, at = self._insert(key, NEW_ROWS[shape])
            detail = {"schedule": key, "written_at": at.isoformat()}
        return {"shape": shape, "expect": EXPECT[shape], **detail}

    def _insert(self, key: str, fields: dict[str, Any]) -> tuple[int, datetime]:
        created = fields.get("created_at")
        if isinstance(created, timedelta):  # that long before now
            fields = {**fields, "created_at": datetime.now(UTC) - created}
        params = {"key": key, "max_catchup": 10, "rrule": "", "run_at": None, **fields}
        ((sid, at),) = self.db.rows(INSERT_SCHEDULE, params)
        return sid, at

    def _corrupt(self, key: str, start: dict[str, Any], corruption: str) -> dict[str, Any]:
        """A valid sacrificial row, planned once by the fleet, then corrupted in place."""
        sid, at = self._insert(key, {**start, **SACRIFICE})
        planned = self._waited(
            "SELECT next_due_at > %(at)s FROM django_jobs_schedule WHERE id = %(id)s",
            {"id": sid, "at": at},
        )
        ((corrupted_at,),) = self.db.rows(
            UPDATE_SCHEDULE.format(corruption=corruption), {"id": sid}
        )
        return {
            "schedule": key,
            "written_at": at.isoformat(),
            "corrupted_at": corrupted_at.isoformat(),
            "planned_before_corruption": planned,
        }

    def _forge(self) -> dict[str, Any]:
        """An occurrence of a campaign schedule in another tenant's name, due in 1.5 s (an
        instant no whole-second timing has); waits for a claim to refuse it."""
        target = self.rng.choice(FORGE_ON)
        ((sid, at),) = self.db.rows(
            "SELECT id, date_trunc('second', clock_timestamp()) + interval '1.5 seconds'"
            " FROM django_jobs_schedule WHERE tenant = '' AND key = %s",
            [target],
        )
        oid = occurrence_id(FORGED_TENANT, target, at)
        ((written,),) = self.db.rows(
            INSERT_OCCURRENCE, {"id": oid, "schedule": sid, "tenant": FORGED_TENANT, "at": at}
        )
        refused = self._waited(
            "SELECT state = 'dead' FROM django_jobs_occurrence WHERE id = %(id)s", {"id": oid}
        )
        return {
            "occurrence": str(oid),
            "schedule": target,
            "tenant": FORGED_TENANT,
            "written_at": written.isoformat(),
            "refused_within_wait": refused,
        }

    def _waited(self, sql: str, params: dict[str, Any]) -> bool:
        """Wait (at most ``WAIT_SECONDS``) until ``sql`` answers true; say whether it did."""
        try:
            wait_for(lambda: bool(self.db.rows(sql, params)[0][0]), timeout=WAIT_SECONDS, what="")
        except TimeoutError:
            return False
        return True


def _of_shapes(details: list[dict[str, Any]], shapes: tuple[str, ...]) -> list[dict[str, Any]]:
    return [d for d in details if d.get("shape") in shapes]


def undecided(db: Rows, details: list[dict[str, Any]], *, cutoff: datetime) -> int:
    """How many hostile rows the fleet has not dealt with yet: not parked, not caught up, not
    refused. The campaign waits for none before it checks."""
    left = 0
    for d in details:
        if d["shape"] == FORGED:
            rows = db.rows(
                "SELECT state FROM django_jobs_occurrence WHERE id = %s", [d["occurrence"]]
            )
            left += not rows or rows[0][0] != "dead"
            continue
        rows = db.rows(
            "SELECT parked_field, last_scheduled_at FROM django_jobs_schedule"
            " WHERE tenant = '' AND key = %s",
            [d["schedule"]],
        )
        if not rows:
            continue
        parked, last = rows[0]
        if d["expect"]:
            left += not parked
        else:
            left += not parked and (last is None or last < cutoff - CAUGHT_UP)
    return left


def hostile_rows(
    found: Findings,
    db: Rows,
    details: list[dict[str, Any]],
    lives: list[Incarnation],
    *,
    cutoff: datetime,
) -> None:
    """What became of every hostile row the campaign wrote (``details``: what it wrote)."""
    invalid: set[tuple[str, str]] = set()
    refused: set[str] = set()
    for life in lives:
        for event in life.events():
            if event.get("event") == "schedule.invalid":
                invalid.add((str(event.get("schedule")), str(event.get("field"))))
            elif event.get("event") == "occurrence.refused":
                refused.add(str(event.get("occurrence")))
    found.figures["hostile_rows_by_shape"] = dict(
        sorted(Counter(d["shape"] for d in details).items())
    )
    parked_shapes = tuple(s for s, field in EXPECT.items() if field not in ("", TENANT_MISMATCH))
    parked(found, db, _of_shapes(details, parked_shapes), invalid)
    planned_in_bounded_passes(found, db, _of_shapes(details, CATCHING_UP), cutoff=cutoff)
    passes = [
        float(event["seconds"])
        for life in lives
        for event in life.events()
        if event.get("event") == "plan.pass" and "seconds" in event
    ]
    found.figures["plan_pass_longest_s"] = max(passes, default=None)
    forged_never_run(found, db, _of_shapes(details, (FORGED,)), refused)


def parked(
    found: Findings, db: Rows, details: list[dict[str, Any]], logged: set[tuple[str, str]]
) -> None:
    """Every hostile schedule row the planner must refuse is parked, naming the field the
    campaign corrupted, with ``next_due_at`` cleared and ``schedule.invalid`` logged; nothing
    of it is planned after it was written (for a corrupted one, no instant beyond what a pass
    before the corruption planned ahead: ``PLAN_AHEAD_SECONDS`` after it)."""
    problems, delays = [], []
    for d in details:
        key, expect = d["schedule"], d["expect"]
        rows = db.rows(
            "SELECT id, parked_field, parked_at, next_due_at FROM django_jobs_schedule"
            " WHERE tenant = '' AND key = %s",
            [key],
        )
        if not rows:
            problems.append(f"{key} ({d['shape']}): the row the campaign wrote is gone")
            continue
        sid, field, parked_at, next_due = rows[0]
        if field != expect:
            problems.append(
                f"{key} ({d['shape']}): parked_field {field!r}, expected {expect!r}"
                + ("" if field else f"; next due {next_due}")
            )
            continue
        written = datetime.fromisoformat(d.get("corrupted_at") or d["written_at"])
        delays.append((parked_at - written).total_seconds())
        if next_due is not None:
            problems.append(f"{key}: parked for {field} but still due at {next_due}")
        if (key, field) not in logged:
            problems.append(f"{key}: parked for {field}, but no replica logged schedule.invalid")
        # A new row: nothing of it. A corrupted one: nothing beyond what was planned ahead
        # before the corruption (those stay: parking stops planning, it does not unplan).
        since = written + AHEAD + SLACK if "corrupted_at" in d else None
        ((after,),) = db.rows(
            "SELECT count(*) FROM django_jobs_occurrence WHERE schedule_id = %s"
            " AND scheduled_at > COALESCE(%s, '-infinity'::timestamptz)",
            [sid, since],
        )
        if after:
            problems.append(f"{key}: {after} occurrence(s) planned after it was written")
    found.figures["hostile_rows_parked"] = len(delays)
    found.figures["hostile_parked_after_max_s"] = round(max(delays), 3) if delays else None
    found.check("hostile schedule rows parked, naming the field", problems)


def planned_in_bounded_passes(
    found: Findings, db: Rows, details: list[dict[str, Any]], *, cutoff: datetime
) -> None:
    """A valid schedule created in 1970 is never parked, is planned in bounded passes (no
    skip summary of it spans more than the planner's ``HEAD_WINDOW``, a month), and has caught
    up by the end: planned to within ``CAUGHT_UP`` of the end of the faults."""
    problems, passes, longest, took = [], 0, timedelta(0), []
    for d in details:
        key = d["schedule"]
        rows = db.rows(
            "SELECT id, parked_field, last_scheduled_at FROM django_jobs_schedule"
            " WHERE tenant = '' AND key = %s",
            [key],
        )
        if not rows:
            problems.append(f"{key}: the row the campaign wrote is gone")
            continue
        sid, field, last = rows[0]
        if field:
            problems.append(f"{key}: a valid row parked for {field}")
        summaries = db.rows(
            "SELECT at, after FROM django_jobs_auditrecord"
            " WHERE action = 'misfire.skipped' AND target_id = %s",
            [str(sid)],
        )
        for at, after in summaries:
            after = json.loads(after) if isinstance(after, str) else after
            span = datetime.fromisoformat(after["last"]) - datetime.fromisoformat(after["first"])
            longest = max(longest, span)
            if span > HEAD_WINDOW:
                problems.append(f"{key}: one pass skipped {span.days} days at {at:%H:%M:%S}")
        passes += len(summaries)
        if last is None or last < cutoff - CAUGHT_UP:
            problems.append(f"{key}: planned only up to {last}, not caught up")
        elif summaries:
            last_pass = max(at for at, _ in summaries)
            took.append((last_pass - datetime.fromisoformat(d["written_at"])).total_seconds())
    found.figures["ancient_passes"] = passes
    found.figures["ancient_longest_pass_days"] = round(longest / timedelta(days=1), 2)
    found.figures["ancient_caught_up_after_max_s"] = round(max(took), 3) if took else None
    found.check("ancient schedules planned in bounded passes", problems)


def forged_never_run(
    found: Findings, db: Rows, details: list[dict[str, Any]], logged: set[str]
) -> None:
    """An occurrence in another tenant's name than its schedule's is never run (no attempt,
    no effect), ends dead with ``TenantMismatch``, and the refusal is logged."""
    problems, delays = [], []
    for d in details:
        oid = d["occurrence"]
        rows = db.rows(
            "SELECT state, last_error_type, attempts, finished_at FROM django_jobs_occurrence"
            " WHERE id = %s",
            [oid],
        )
        if not rows:
            problems.append(f"forged occurrence {oid}: gone")
            continue
        state, error, attempts, finished = rows[0]
        ((tries,),) = db.rows(
            "SELECT count(*) FROM django_jobs_attempt WHERE occurrence_id = %s", [oid]
        )
        ((effects,),) = db.rows(
            "SELECT count(*) FROM chaos_effect WHERE occurrence_key = %s", [oid]
        )
        if (state, error) != ("dead", TENANT_MISMATCH):
            problems.append(
                f"forged occurrence {oid} of {d['schedule']}: {state} ({error or 'no error'})"
            )
        else:
            delays.append((finished - datetime.fromisoformat(d["written_at"])).total_seconds())
        if tries or attempts or effects:
            problems.append(
                f"forged occurrence {oid} of {d['schedule']}: ran ({tries} attempt row(s),"
                f" {attempts} attempt(s) counted, {effects} effect(s))"
            )
        if oid not in logged:
            problems.append(f"forged occurrence {oid}: no replica logged occurrence.refused")
    found.figures["forged_refused"] = len(delays)
    found.figures["forged_refused_after_max_s"] = round(max(delays), 3) if delays else None
    found.check("forged occurrences never run", problems)
