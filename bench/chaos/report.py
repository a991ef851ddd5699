"""The campaign's figures, as JSON and as the markdown table docs/reliability.md quotes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from .faults import Fault
from .invariants import Findings


def build(
    *, config: dict[str, Any], findings: Findings, faults: list[Fault], versions: dict[str, str]
) -> dict[str, Any]:
    return {
        "config": config,
        "versions": versions,
        "passed": findings.passed,
        "figures": findings.figures,
        "faults_by_kind": dict(sorted(Counter(f.kind for f in faults).items())),
        "faults": [f.as_dict() for f in faults],
        "violations": {name: problems[:50] for name, problems in findings.violations.items()},
        "violation_counts": {name: len(p) for name, p in findings.violations.items()},
    }


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def markdown(report: dict[str, Any]) -> str:
    c, f = report["config"], report["figures"]
    lines = [
        f"### Fault campaign: seed {c['seed']}, {c['minutes']} min, {c['replicas']} replicas"
        f" x {c['concurrency']}, {c['database']}",
        "",
        f"Command: `{c['command']}`  ",
        f"Result: **{'PASSED' if report['passed'] else 'FAILED'}**",
        "",
        "| figure | value |",
        "|---|---|",
        f"| occurrences due | {f['due']} |",
    ]
    lines += [f"| &nbsp; {state} | {n} |" for state, n in f["outcomes"].items()]
    lines += [
        f"| faults injected | {sum(report['faults_by_kind'].values())} |",
    ]
    lines += [f"| &nbsp; {kind} | {n} |" for kind, n in report["faults_by_kind"].items()]
    lines += [
        f"| &nbsp; &nbsp; hostile_row: {shape} | {n} |"
        for shape, n in f.get("hostile_rows_by_shape", {}).items()
    ]
    lines += [
        f"| &nbsp; &nbsp; statement_error: {statement} | {n} |"
        for statement, n in f.get("statement_faults_by_kind", {}).items()
    ]
    for label, key in [
        ("duplicate effects (must be 0)", "duplicate_effects"),
        ("duplicate completions (must be 0)", "duplicate_completions"),
        ("lost occurrences (must be 0)", "lost"),
        ("work enqueued by application code, committed", "enqueued"),
        ("&nbsp; completed", "enqueued_completed"),
        ("&nbsp; not completed (must be 0)", "enqueued_lost"),
        ("stale completions refused at the fenced write (fenced_out)", "stale_completions_refused"),
        (
            "stale runs stopped by the token check before commit (lease.lost)",
            "stale_runs_stopped_before_commit",
        ),
        ("outside calls applied once", "outside_calls_applied"),
        (
            "outside calls delivered again (absorbed by the idempotency key)",
            "outside_calls_redelivered",
        ),
        ("work taken over after SIGKILL/SIGSTOP", "takeovers"),
        ("takeover time p50 (s)", "takeover_p50_s"),
        ("takeover time p99 (s)", "takeover_p99_s"),
        ("start lateness p50 (s)", "start_lateness_p50_s"),
        ("start lateness p99 (s)", "start_lateness_p99_s"),
        ("worst start lateness (s)", "worst_lateness_s"),
        ("replicas drained by SIGTERM", "sigterm_drains"),
        ("replica lives with a skewed clock", "skewed_lives"),
        ("largest clock error left after the start-up sync (ms)", "clock_skew_residual_max_ms"),
        ("replica lives", "replica_lives"),
        ("most outage log lines of one replica", "outage_log_lines_max_per_replica"),
        ("crash loops (crasher occurrences due)", "crash_loops"),
        ("&nbsp; ended dead", "crash_loops_dead"),
        ("crasher starts (replica lives it killed)", "crasher_starts"),
        ("most starts of one crasher occurrence", "crasher_most_starts"),
        ("replica lives ended by the crasher (exit 1)", "lives_ended_by_crasher"),
        ("runs cut off for ignoring cancellation (run.cut_off)", "runs_cut_off"),
        ("replica lives ended after a cut-off (exit 3)", "lives_ended_after_cut_off"),
        ("`chaos.stubborn` runs taken over", "stubborn_runs_taken_over"),
        (
            "&nbsp; old holder still working after the takeover",
            "old_holders_working_after_takeover",
        ),
        ("&nbsp; longest it went on (s)", "old_holder_longest_after_takeover_s"),
        ("&nbsp; allowed: lease + grace of its running time (s)", "old_holder_budget_s"),
        ("&nbsp; least time left to its deadline (s)", "old_holder_least_margin_s"),
        ("attempts ended by a store outage (not failures)", "attempts_ended_by_outage"),
        ("&nbsp; of them `chaos.reader`", "reader_attempts_ended_by_outage"),
        (
            "attempts failed by a session cut while the store answered (the job's, by design)",
            "sessions_cut_while_store_answered",
        ),
        ("session views recorded", "session_views"),
        ("&nbsp; on a connection a leaker had used", "session_views_after_a_leak"),
        ("&nbsp; with state left by an earlier run (must be 0)", "session_views_with_leaks"),
        ("coroutine occurrences completed with their effect", "coroutines_completed_with_effect"),
        ("hostile schedule rows parked, naming the field", "hostile_rows_parked"),
        ("&nbsp; longest from the write to the park (s)", "hostile_parked_after_max_s"),
        ("ancient schedule passes (skip summaries)", "ancient_passes"),
        ("&nbsp; most of a gap one pass skipped (days)", "ancient_longest_pass_days"),
        ("&nbsp; longest from the write to caught up (s)", "ancient_caught_up_after_max_s"),
        ("longest plan pass of any replica (s)", "plan_pass_longest_s"),
        ("forged occurrences refused (dead, TenantMismatch)", "forged_refused"),
        ("&nbsp; longest from the write to the refusal (s)", "forged_refused_after_max_s"),
        ("peak memory of a replica life (VmHWM, MiB)", "replica_peak_rss_max_mib"),
        (
            "&nbsp; of the lives up once a hostile row was written",
            "replica_peak_rss_max_mib_hostile",
        ),
        ("&nbsp; allowed (MiB)", "replica_peak_rss_bound_mib"),
        ("non-outage statement errors injected (statements failed)", "statement_errors_raised"),
        ("&nbsp; statement faults met by a replica", "statement_faults_met"),
        (
            "&nbsp; replica lives asked to start a run within 20 s after one",
            "lives_asked_to_serve_after_statement_faults",
        ),
        ("one-offs declared after their instant", "late_one_offs_declared"),
        ("&nbsp; within max_delay, run exactly once", "late_one_offs_ran_once"),
        ("&nbsp; beyond max_delay, skipped for their misfire", "late_one_offs_skipped"),
        ("poison and hang one-offs declared (max_attempts 2 each)", "poisons_declared"),
        ("&nbsp; most attempts counted of one", "poison_most_attempts_counted"),
        ("&nbsp; SystemExit / KeyboardInterrupt runs", "exit_poison_runs"),
        ("runs seen by their own heartbeats", "beaten_runs"),
        ("&nbsp; pairs of runs of one occurrence beating at once", "runs_beating_at_once"),
        ("&nbsp; longest at once (s)", "runs_beating_at_once_longest_s"),
        ("runs that ignore their timeout (`chaos.hang`)", "hang_runs"),
        ("&nbsp; of them during a store outage", "hang_runs_in_an_outage"),
        ("&nbsp; least time left to timeout + grace (s)", "hang_least_margin_s"),
        ("attempts excused as injected outages", "attempts_excused_as_outages"),
        ("most attempts of one occurrence over its max_attempts", "attempts_most_over_max"),
    ]:
        lines.append(f"| {label} | {_fmt(f.get(key))} |")
    if c.get("ha"):
        lines += _failover_rows(c, f)
    lines += [
        "",
        "| schedule | overlap | lateness p50 (s) | p99 (s) | worst (s) |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| `{key}` | {row['overlap']} | {_fmt(row['p50_s'])} | {_fmt(row['p99_s'])}"
        f" | {_fmt(row['worst_s'])} |"
        for key, row in f.get("lateness_by_schedule", {}).items()
    ]
    lines += ["", "| invariant | violations |", "|---|---|"]
    lines += [f"| {name} | {n} |" for name, n in report["violation_counts"].items()]
    for name, problems in report["violations"].items():
        if problems:
            lines += ["", f"**{name}**:", *[f"- {p}" for p in problems[:20]]]
    return "\n".join(lines) + "\n"


def _failover_rows(c: dict[str, Any], f: dict[str, Any]) -> list[str]:
    """The rows of a campaign on a primary and a standby (``--ha``), and its mode's note."""
    rows = [
        ("failovers", "failovers"),
        ("&nbsp; kill to writable p50 (s)", "failover_writable_s_p50"),
        ("&nbsp; kill to writable max (s)", "failover_writable_s_max"),
        ("&nbsp; kill to new standby streaming p50 (s)", "failover_standby_s_p50"),
        ("&nbsp; kill to first acknowledged commit max (s)", "failover_commit_s_max"),
        ("&nbsp; kill to every replica claiming again p50 (s)", "failover_resumed_p50_s"),
        ("&nbsp; kill to every replica claiming again max (s)", "failover_resumed_max_s"),
        ("&nbsp; WAL the standby never received, max (bytes)", "failover_lost_wal_bytes_max"),
        ("&nbsp; commits the standby never received, max", "failover_lost_commits_max"),
        ("&nbsp; lives ended by the crasher meanwhile", "failover_lives_ended_by_crasher"),
        ("&nbsp; lives ended after a cut-off meanwhile", "failover_lives_ended_by_cut_off"),
    ]
    lines = [f"| {label} | {_fmt(f.get(key))} |" for label, key in rows]
    losses = f.get("wal_tail_losses", {})
    lines += [f"| acknowledged writes lost: {kind} | {n} |" for kind, n in losses.items()]
    if c["ha"] == "async":
        lines += [
            "",
            "Asynchronous replication: a failover loses the WAL the standby had not received,"
            " so violations are expected and classified above (`wal_tail_losses`); the exit"
            " code is still 1.",
        ]
    return lines


def write(report: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    path = out_dir / "report.md"
    path.write_text(markdown(report))
    return path
