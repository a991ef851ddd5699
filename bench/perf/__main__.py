"""``python -m bench.perf``: run the benchmark scenarios on one PostgreSQL and print the table."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from ..postgres import ROOT, Database
from . import thundering


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.perf", description=__doc__)
    parser.add_argument("--schedules", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "perf")
    return parser.parse_args(argv)


def table(rows: list[dict[str, Any]]) -> str:
    columns = [
        ("scenario", "scenario", "{}"),
        ("S", "schedules", "{}"),
        ("W x C", None, "{}"),
        ("makespan s", "makespan_s", "{:.2f}"),
        ("occ/s", "per_second", "{:.0f}"),
        ("late p50 s", "lateness_p50_s", "{:.3f}"),
        ("late p99 s", "lateness_p99_s", "{:.3f}"),
        ("commits/occ", "commits_per_occurrence", "{:.2f}"),
        ("WAL B/occ", "wal_bytes_per_occurrence", "{:.0f}"),
        ("CPU pg s", "postgres_cpu_s", "{:.1f}"),
        ("CPU py s", "workers_cpu_s", "{:.1f}"),
        ("peak RSS MB", "peak_rss_mb", "{:.0f}"),
    ]
    lines = [
        "| " + " | ".join(title for title, _, _ in columns) + " |",
        "|" + "---|" * len(columns),
    ]
    for row in rows:
        cells = []
        for _, key, fmt in columns:
            if key is None:
                cells.append(f"{row['replicas']} x {row['concurrency']}")
            else:
                value = row.get(key)
                cells.append("n/a" if value is None else fmt.format(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    db = Database.create(os.environ.get("DATABASE_URL"), name="django_jobs_perf")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.perf.settings"}
    db.migrate(env)
    os.environ.update({"DJANGO_SETTINGS_MODULE": "bench.perf.settings", "DATABASE_URL": db.url})
    import django

    django.setup()
    rows = []
    for job in ("perf.noop", "perf.atomic"):
        for count in args.schedules:
            row = thundering.run(
                db,
                schedules=count,
                replicas=args.replicas,
                concurrency=args.concurrency,
                job=job,
                log_dir=args.out / "logs",
            )
            print(json.dumps(row), flush=True)
            rows.append(row)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
