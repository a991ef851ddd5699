"""The arguments of ``manage.py jobs``: its subcommands, their options, and the checks every
text argument passes before anything is looked up."""

from __future__ import annotations

import argparse
import math
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ..scheduling.timing import instant_problem
from ..validation import REASON_MAX_CHARS, json_text, text_problem

ACTOR_HELP = (
    "your Django username: its permissions apply and it is audited (self-asserted unless "
    "DJANGO_JOBS['CLI_ACTOR_RULES'] pins it); default: DJANGO_JOBS['CLI_ACTOR'], else the "
    "user named as the OS user running the command"
)
REASON_HELP = "why (kept in the audit record)"

# Text arguments checked before anything is looked up: (how the user names it, longest).
ARGUMENTS = {
    "key": ("KEY", 200),
    "tenant": ("--tenant", 100),
    "queue": ("--queue", 100),
    "actor": ("--actor", 150),
    "occurrence": ("OCCURRENCE", 100),
    "reason": ("--reason", REASON_MAX_CHARS),
}


def check_texts(options: dict[str, Any]) -> None:
    """Refuse what no record can hold, before it reaches the database (which refuses NUL)."""
    for option, (label, longest) in ARGUMENTS.items():
        value = options.get(option)
        problem = None if value is None else text_problem(value, longest)
        if problem is not None:
            raise CommandError(f"{label}: {problem}")


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0 or value > 10**9:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _json_object(text: str) -> dict[str, Any]:
    """A JSON object (argparse type): the arguments of a run-now. What the object may hold is
    checked by the service, as a declaration's arguments are."""
    value, problem = json_text(text)  # nesting bounded before parsing: no RecursionError
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    if not isinstance(value, dict):
        example = '{"customer": "acme"}'
        raise argparse.ArgumentTypeError(
            f"must be a JSON object such as '{example}', got {type(value).__name__}"
        )
    return value


def _instant(text: str) -> datetime:
    """An aware ISO 8601 instant (argparse type); a naive one is refused, not guessed."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 instant such as 2026-12-01T09:00:00+00:00"
        ) from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no UTC offset: add one (Z or +01:00), so the instant is unambiguous"
        )
    problem = instant_problem(value)  # the window every instant a schedule names is in
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value.astimezone(UTC)


def add_subcommands(parser: CommandParser) -> None:
    """Every subcommand of ``jobs`` and its options, in the order ``--help`` lists them."""
    sub = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
    listing = _operator(sub, "list", "List the schedules you may see.", key=False)
    listing.add_argument("--tenant", default=None, help="only this tenant's schedules")
    listing.add_argument(
        "--queue", default=None, help="only the schedules whose occurrences go on this queue"
    )
    listing.add_argument(
        "--dead", action="store_true", help="only the schedules with a dead letter (poison)"
    )
    listing.add_argument(
        "--failing",
        action="store_true",
        help="only the schedules whose newest ended occurrence failed or went dead",
    )
    inspect = _operator(sub, "inspect", "Show a schedule, or one occurrence with its attempts.")
    inspect.add_argument("--occurrence", default=None, help="an occurrence id")
    _add_replay(sub)
    cancel = sub.add_parser(
        "cancel",
        help="Cancel an occurrence that has not finished (waiting: never runs; running: stops).",
        description=(
            "jobs cancel OCCURRENCE_ID cancels that occurrence, as the admin's Cancel does: "
            "waiting (scheduled, or failed and waiting for a retry), it will not run; running, "
            "its lease ends now and the replica running it stops at its next renewal. Needs the "
            "disable permission on its schedule; audited with the reason."
        ),
    )
    cancel.add_argument("occurrence", help="the occurrence id")
    cancel.add_argument("--actor", default=None, help=ACTOR_HELP)
    cancel.add_argument("--reason", required=True, help=REASON_HELP)
    cancel.add_argument("--json", action="store_true", help="print JSON for scripts")
    disable = _operator(sub, "disable", "Stop new claims of a schedule.", reason=True)
    disable.add_argument(
        "--cancel-running", action="store_true", help="also cancel its running occurrence"
    )
    _operator(sub, "enable", "Let replicas claim a schedule again.", reason=True)
    run_now = _operator(
        sub, "run-now", "Plan an extra occurrence at the current instant.", reason=True
    )
    run_now.add_argument(
        "--args",
        dest="run_args",  # Django's call_command takes "args" for the positional arguments
        type=_json_object,
        default=None,
        metavar="JSON",
        help="run it with these arguments (a JSON object) instead of the schedule's; audited",
    )
    _operator(sub, "purge", "Delete finished occurrences beyond the retention Limit.")
    _add_reports(sub)
    books = _operator(
        sub,
        "runbooks",
        "Export the runbooks of the schedules you may see as markdown.",
        key=False,
        json=False,
    )
    books.add_argument("--key", default=None, help="only the schedules with this key")
    books.add_argument("--tenant", default=None, help="only this tenant's schedules")
    _add_sync_and_health(sub)
    _add_top(sub)


def _operator(
    sub: Any, name: str, help: str, *, reason: bool = False, key: bool = True, json: bool = True
) -> argparse.ArgumentParser:
    """A subcommand an operator runs as ``--actor``: on one schedule unless not ``key``."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help, description=help)
    if key:
        p.add_argument("key", help="the schedule key")
        p.add_argument("--tenant", default="", help="the schedule's tenant")
    p.add_argument("--actor", default=None, help=ACTOR_HELP)
    if reason:
        p.add_argument("--reason", required=True, help=REASON_HELP)
    if json:
        p.add_argument("--json", action="store_true", help="print JSON for scripts")
    return p


def _add_replay(sub: Any) -> None:
    replay = sub.add_parser(
        "replay",
        help="Replay an occurrence: a new attempt under the same identity.",
        description=(
            "jobs replay OCCURRENCE_ID replays that occurrence. jobs replay KEY --at "
            "INSTANT replays the occurrence of that planned instant of the schedule, "
            "creating it if it has no row (a skipped instant counted in a summary, or a "
            "purged one): same identity as ever, trigger manual. An instant the "
            "schedule's timing does not produce is refused, naming the nearest ones."
        ),
    )
    replay.add_argument("occurrence", help="the occurrence id, or with --at the schedule key")
    replay.add_argument(
        "--at",
        type=_instant,
        default=None,
        help="an instant of the schedule, ISO 8601 with its offset (2026-12-01T09:00Z)",
    )
    replay.add_argument("--tenant", default="", help="the schedule's tenant (with --at)")
    replay.add_argument("--actor", default=None, help=ACTOR_HELP)
    replay.add_argument("--reason", required=True, help=REASON_HELP)
    replay.add_argument("--json", action="store_true", help="print JSON for scripts")


def _add_reports(sub: Any) -> None:
    for name, summary, description in (
        (
            "departures",
            "List every recorded departure (Exception record) of jobs and schedules.",
            "Each Departure(reason=, review_by=, rule=) recorded on a @job or a schedule(): "
            "the rule it departs from, why, and its review date; past-due ones first.",
        ),
        (
            "handlers",
            "List each job handler, its app, and the commands and ports it dispatches.",
            "What checks W024 and W026 read: each handler's application commands and "
            "approved ports (DJANGO_JOBS COMMANDS and APPROVED_PORTS) and its app.",
        ),
    ):
        report = sub.add_parser(name, help=summary, description=description)
        report.add_argument("--json", action="store_true", help="print JSON for scripts")


def _add_sync_and_health(sub: Any) -> None:
    sync = sub.add_parser(
        "sync",
        help="Write the schedules declared in schedules.py modules to the database.",
        description=(
            "Create new declared schedules, update changed ones (timing changes are "
            "audited) and retire ones no longer declared. The worker also runs this at start."
        ),
    )
    sync.add_argument("--json", action="store_true", help="Print the report as JSON.")
    health = sub.add_parser(
        "health",
        help="Exit non-zero unless every runworker replica on this host heartbeated recently.",
        description=(
            "For a process manager or a Kubernetes liveness probe: exits 1 when a replica "
            "on this host has not heartbeated within --max-age seconds, or when none runs."
        ),
    )
    health.add_argument(
        "--max-age",
        type=_seconds,
        default=None,
        help="Seconds without a heartbeat that count as dead (default: 3 x HEARTBEAT_SECONDS).",
    )
    health.add_argument("--host", default=None, help="Check this host (default: this one).")
    health.add_argument("--json", action="store_true", help="Print the replicas as JSON.")


def _add_top(sub: Any) -> None:
    top = _operator(
        sub,
        "top",
        "Watch the fleet: due backlog, running occurrences, recent failures, replicas.",
        key=False,
    )
    top.description = (
        "A terminal view of what --actor may see, as the admin's dashboard scopes it, redrawn "
        "every --interval seconds until Ctrl-C: the due backlog and its age, the running "
        "occurrences with their replica and elapsed time, the failures and dead letters of "
        "the last --since seconds (15 minutes by default), and (with django_jobs.view_replica) "
        "the replicas with their heartbeat's age. --once prints it once, for scripts."
    )
    top.add_argument("--once", action="store_true", help="print one view and exit")
    top.add_argument(
        "--interval",
        type=_seconds,
        default=2.0,
        help="seconds between two views (default 2)",
    )
    top.add_argument(
        "--since",
        type=_seconds,
        default=15 * 60,
        metavar="SECONDS",
        help="how far back recent failures are listed (default 900: 15 minutes)",
    )
    top.add_argument("--tenant", default=None, help="only this tenant's schedules")
    top.add_argument("--queue", default=None, help="only this queue's occurrences")
