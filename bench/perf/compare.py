"""``python -m bench.perf.compare --base REV``: the thundering second before and after a change;
with ``--scenario burst``, the user's-path burst (``--job noop`` or ``atomic``, ``--lead``).

A restructuring must not slow the user's path, and one run of a burst on a shared machine
varies by a fifth. So the same scenario runs alternately on a checkout of ``REV`` (a git
worktree in a temporary folder) and on this checkout, round after round, and the report is
the paired ratio of each round (new over base), its geometric mean and twice its standard
error, beside the medians. Each side gets its own fresh database (``--database``-style names
``bench_compare_base`` and ``bench_compare_new``), on the server ``DATABASE_URL`` names (its
``postgres`` database is used to create them) or on embedded PostgreSQL without it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ..postgres import ROOT

FIGURES = ("per_second", "workers_cpu_s", "postgres_cpu_s", "makespan_s", "lateness_p99_s")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.compare", description=__doc__)
    parser.add_argument("--base", required=True, help="the git revision to compare against")
    parser.add_argument("--rounds", type=int, default=8, help="base/new pairs (default 8)")
    parser.add_argument("--schedules", type=int, default=10000, help="S of the burst")
    parser.add_argument(
        "--scenario",
        choices=("thundering", "burst"),
        default="thundering",
        help="the thundering second (schedules inserted at run time), or the user's-path "
        "burst (declared, synced, replicas started --lead seconds before it)",
    )
    parser.add_argument("--job", choices=("noop", "atomic"), default="noop", help="burst's handler")
    parser.add_argument("--lead", type=float, default=60, help="burst: the replicas' lead (s)")
    return parser.parse_args(argv)


def scenario_options(args: argparse.Namespace) -> tuple[list[str], str]:
    """The ``bench.perf`` options of the compared scenario, and the start of its row's name."""
    if args.scenario == "burst":
        options = ["--scenarios", "burst", "--declared", str(args.schedules)]
        options += ["--burst-jobs", args.job, "--lead", str(args.lead)]
        return options, f"user's path ({args.job})"
    return ["--scenarios", "thundering", "--schedules", str(args.schedules)], "thundering"


def run_side(
    checkout: Path, *, side: str, scenario: tuple[list[str], str], out: Path
) -> dict[str, float]:
    """One run of the scenario on ``checkout``; its figures."""
    options, name = scenario
    command = [sys.executable, "-m", "bench.perf", *options]
    command += ["--database", f"bench_compare_{side}", "--out", str(out)]
    done = subprocess.run(command, cwd=checkout, capture_output=True, text=True, check=True)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    (row,) = [r for r in rows if r.get("scenario", "").startswith(name)]
    return {figure: float(row[figure]) for figure in FIGURES}


def paired(base: list[float], new: list[float]) -> tuple[float, float]:
    """The geometric mean of new/base over the rounds, and twice its standard error."""
    logs = [math.log(n / b) for b, n in zip(base, new, strict=True)]
    spread = statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else 0.0
    return math.exp(statistics.mean(logs)), 2 * spread


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        base_checkout = Path(tmp) / "base"
        git = ["git", "-C", str(ROOT)]
        subprocess.run([*git, "worktree", "add", "-q", str(base_checkout), args.base], check=True)
        try:
            runs: dict[str, list[dict[str, float]]] = {"base": [], "new": []}
            for n in range(args.rounds):
                for side, checkout in (("base", base_checkout), ("new", ROOT)):
                    out = Path(tmp) / f"{side}-{n}"
                    runs[side].append(
                        run_side(checkout, side=side, scenario=scenario_options(args), out=out)
                    )
                    figures = runs[side][-1]
                    print(f"round {n + 1} {side}: {figures['per_second']:.0f} occurrences/s")
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(base_checkout)], check=True)
    _, name = scenario_options(args)
    print(f"\n{name}, S = {args.schedules}, {args.rounds} rounds, base {args.base}")
    print("| figure | base median | new median | new/base (paired) |")
    print("|---|---|---|---|")
    for figure in FIGURES:
        base = [r[figure] for r in runs["base"]]
        new = [r[figure] for r in runs["new"]]
        ratio, error = paired(base, new)
        print(
            f"| {figure} | {statistics.median(base):.3f} | {statistics.median(new):.3f} "
            f"| {ratio:.3f} ± {error:.3f} |"
        )


if __name__ == "__main__":
    main()
