"""``manage.py jobs``: operate scheduled jobs. Thin: parse, call a service, print.

Operator subcommands take ``--actor``, a Django username whose permissions apply (object and
tenant permissions included) and who is named in the audit record. It is self-asserted:
whoever can run ``manage.py`` holds the database credentials and is trusted in full.
``DJANGO_JOBS["CLI_ACTOR_RULES"]`` narrows whom it may name (the OS user's own name, no
superuser), so the audit trail says who ran the command, not merely who they claimed to be.
"""

from __future__ import annotations

import argparse
import getpass
import json
import math
import socket
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import conventions, permissions, runbooks, services
from ...clock import SystemClock
from ...conf import get_settings
from ...declarations import declared
from ...exceptions import JobsError
from ...models import Occurrence, Schedule
from ...registry import registry
from ...scheduling import rrules
from ...scheduling.timings import is_utc

ACTED = {
    "replay": "replayed",
    "disable": "disabled",
    "enable": "enabled",
    "run-now": "planned a run of",
}


ACTOR_HELP = (
    "your Django username: its permissions apply and it is audited (self-asserted unless "
    "DJANGO_JOBS['CLI_ACTOR_RULES'] pins it)"
)

# Text arguments checked before anything is looked up: (how the user names it, longest).
ARGUMENTS = {
    "key": ("KEY", 200),
    "tenant": ("--tenant", 100),
    "actor": ("--actor", 150),
    "occurrence": ("OCCURRENCE", 100),
    "reason": ("--reason", 2000),
}


def _check_text(label: str, value: str | None, longest: int) -> None:
    """Refuse what no record can hold, before it reaches the database (which refuses NUL)."""
    if value is None:
        return
    if len(value) > longest:
        raise CommandError(f"{label}: at most {longest} characters, got {len(value)}")
    if not all(ch.isprintable() or ch in "\n\t" for ch in value):
        raise CommandError(f"{label}: must not contain NUL or other control characters")


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0 or value > 10**9:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
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
    return value.astimezone(UTC)


def _need_os_user(username: str) -> None:
    """``CLI_ACTOR_RULES`` ``"os_user"``: the actor is the OS user running the command, so an
    operator cannot act, and be audited, under a colleague's name."""
    try:
        os_user = getpass.getuser()
    except (OSError, KeyError):  # no LOGNAME/USER and no passwd entry (a bare container)
        raise CommandError(
            "--actor: DJANGO_JOBS['CLI_ACTOR_RULES'] requires the OS user's name, and this "
            "process has none (set LOGNAME or USER)"
        ) from None
    if username != os_user:
        raise CommandError(
            f"--actor {username!r} is not the OS user running this command ({os_user!r}), and "
            "DJANGO_JOBS['CLI_ACTOR_RULES'] requires it: run it as that user, or act as "
            f"{os_user!r}"
        )


def _calendar_rule(schedule: Schedule) -> dict[str, Any]:
    """A calendar rule's text, the rule in words and its business calendar (nothing for the
    other timings)."""
    if schedule.timing_kind != "rrule":
        return {}
    try:
        words = rrules.from_fields(schedule).describe()
    except (ValueError, OverflowError) as exc:  # a record the planner parks (check E030)
        words = f"(cannot be evaluated: {exc})"
    return {
        "rrule": schedule.rrule,
        "rule_in_words": words,
        "calendar": schedule.calendar or None,
        "on_excluded": schedule.on_excluded,
    }


def _local_time(schedule: Schedule) -> dict[str, str]:
    """A business-local schedule's zone, its reason and its DST choices (nothing for UTC)."""
    if schedule.timing_kind not in ("cron", "rrule") or is_utc(schedule.time_zone):
        return {}
    return {
        "time_zone": schedule.time_zone,
        "zone_reason": schedule.zone_reason or "(none recorded: check W023)",
        "skipped_time": schedule.skipped_time,
        "repeated_time": schedule.repeated_time,
    }


class Command(BaseCommand):
    help = (
        "Operate scheduled jobs: list, inspect, replay, disable, enable, run-now, purge, "
        "handlers, departures, runbooks, sync, health."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")

        def operator(name: str, help: str, *, reason: bool = False, key: bool = True) -> Any:
            p = sub.add_parser(name, help=help, description=help)
            if key:
                p.add_argument("key", help="the schedule key")
                p.add_argument("--tenant", default="", help="the schedule's tenant")
            p.add_argument("--actor", required=True, help=ACTOR_HELP)
            if reason:
                p.add_argument("--reason", required=True, help="why (kept in the audit record)")
            p.add_argument("--json", action="store_true", help="print JSON for scripts")
            return p

        listing = operator("list", "List the schedules you may see.", key=False)
        listing.add_argument("--tenant", default=None, help="only this tenant's schedules")
        inspect = operator("inspect", "Show a schedule, or one occurrence with its attempts.")
        inspect.add_argument("--occurrence", default=None, help="an occurrence id")
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
        replay.add_argument("--actor", required=True, help=ACTOR_HELP)
        replay.add_argument("--reason", required=True, help="why (kept in the audit record)")
        replay.add_argument("--json", action="store_true", help="print JSON for scripts")
        disable = operator("disable", "Stop new claims of a schedule.", reason=True)
        disable.add_argument(
            "--cancel-running", action="store_true", help="also cancel its running occurrence"
        )
        operator("enable", "Let replicas claim a schedule again.", reason=True)
        operator("run-now", "Plan an extra occurrence at the current instant.", reason=True)
        operator("purge", "Delete finished occurrences beyond the retention Limit.")
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
        books = sub.add_parser("runbooks", help="Export each schedule's runbooks as markdown.")
        books.add_argument("--key", default=None)
        books.add_argument("--tenant", default=None)

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

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["subcommand"].replace("-", "_")
        for option, (label, longest) in ARGUMENTS.items():
            _check_text(label, options.get(option), longest)
        try:
            getattr(self, f"_{name}")(options)
        except JobsError as exc:
            raise CommandError(str(exc)) from exc

    # --- helpers ----------------------------------------------------------------------

    def _actor(self, options: dict[str, Any]) -> Any:
        username = options["actor"]
        rules = get_settings().CLI_ACTOR_RULES
        if "os_user" in rules:
            _need_os_user(username)
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"--actor {username!r} is not a user of this project")
        if "no_superuser" in rules and user.is_superuser:
            raise CommandError(
                f"--actor {username!r} is a superuser, and DJANGO_JOBS['CLI_ACTOR_RULES'] "
                "refuses superusers on the command line: act as a user with the permissions "
                "the action needs"
            )
        return user

    def _schedule(self, options: dict[str, Any], actor: Any) -> Schedule:
        schedule = Schedule.objects.filter(tenant=options["tenant"], key=options["key"]).first()
        # An unknown key and one the actor may not see answer alike: no existence leak.
        if schedule is None or not permissions.allowed(actor, "view", schedule):
            where = f" in tenant {options['tenant']!r}" if options["tenant"] else ""
            raise CommandError(f"no schedule {options['key']!r}{where} that you may see")
        return schedule

    def _emit(self, options: dict[str, Any], data: Any, text: str) -> None:
        self.stdout.write(json.dumps(data, indent=2, default=str) if options.get("json") else text)

    # --- subcommands ------------------------------------------------------------------

    def _list(self, options: dict[str, Any]) -> None:
        rows = permissions.visible(self._actor(options)).order_by("tenant", "key")
        if options["tenant"] is not None:
            rows = rows.filter(tenant=options["tenant"])
        data = [
            {
                "tenant": s.tenant,
                "key": s.key,
                "job": s.job,
                "status": s.status,
                "enabled": s.enabled,
                "next_due_at": s.next_due_at,
                "last_completed_at": s.last_completed_at,
            }
            for s in rows
        ]
        lines = [
            f"{s!s:40} {s.status:8} {'enabled' if s.enabled else 'DISABLED':9} "
            f"next {s.next_due_at.isoformat() if s.next_due_at else '-'}"
            for s in rows
        ]
        self._emit(options, data, "\n".join(lines) or "no schedules you may see")

    def _inspect(self, options: dict[str, Any]) -> None:
        actor = self._actor(options)
        schedule = self._schedule(options, actor)
        if options["occurrence"]:
            self._inspect_occurrence(options, actor, schedule)
            return
        report = services.inspect_schedule(schedule, actor=actor, now=SystemClock().now())
        schedule = report.schedule  # the row the service read and checked
        data: dict[str, Any] = {
            "schedule": str(schedule),
            "job": schedule.job,
            "status": schedule.status,
            **_calendar_rule(schedule),
            **_local_time(schedule),
            "enabled": schedule.enabled,
            "disabled": {"by": schedule.disabled_by, "reason": schedule.disabled_reason}
            if not schedule.enabled
            else None,
            "next_due_at": schedule.next_due_at,
            "parked": {
                "field": schedule.parked_field,
                "reason": schedule.parked_reason,
                "at": schedule.parked_at,
            }
            if schedule.parked_field
            else None,
            "next_runs": report.next_runs,
            "last_scheduled_at": schedule.last_scheduled_at,
            "last_started_at": schedule.last_started_at,
            "last_completed_at": schedule.last_completed_at,
            "lateness_seconds": report.lateness.total_seconds() if report.lateness else 0,
            "recent": [
                {
                    "id": str(o.pk),
                    "scheduled_at": o.scheduled_at,
                    "state": o.state,
                    "attempts": o.attempts,
                    "error": o.last_error_message[:200],
                }
                for o in report.recent
            ],
        }
        text = "\n".join(
            [f"{k}: {v}" for k, v in data.items() if k != "recent"]
            + [
                f"  {o['scheduled_at']} {o['state']:10} attempts {o['attempts']} {o['id']}"
                for o in data["recent"]
            ]
        )
        self._emit(options, data, text)

    def _inspect_occurrence(self, options: dict[str, Any], actor: Any, schedule: Schedule) -> None:
        occurrence = self._occurrence(options["occurrence"], actor, schedule=schedule)
        attempts = services.inspect_occurrence(occurrence, actor=actor)
        data: dict[str, Any] = {
            "id": str(occurrence.pk),
            "schedule": str(schedule),
            "scheduled_at": occurrence.scheduled_at,
            "state": occurrence.state,
            "skip_reason": occurrence.skip_reason,
            "lease_owner": occurrence.lease_owner,
            "lease_expires_at": occurrence.lease_expires_at,
            "fencing_token": occurrence.fencing_token,
            "last_error": {
                "type": occurrence.last_error_type,
                "message": occurrence.last_error_message,
            },
            "attempts": [
                {
                    "number": a.number,
                    "token": a.fencing_token,
                    "replica": a.replica,
                    "trigger": a.trigger,
                    "outcome": a.outcome,
                    "started_at": a.started_at,
                    "finished_at": a.finished_at,
                    "error": a.error_message[:200],
                }
                for a in attempts
            ],
        }
        text = "\n".join(
            [f"{k}: {v}" for k, v in data.items() if k != "attempts"]
            + [
                f"  attempt {a['number']} token {a['token']} {a['trigger']:8} {a['outcome']:10} "
                f"{a['replica']} {a['error']}"
                for a in data["attempts"]
            ]
        )
        self._emit(options, data, text)

    def _occurrence(
        self, ident: str, actor: Any, *, schedule: Schedule | None = None
    ) -> Occurrence:
        try:
            occurrence = Occurrence.objects.select_related("schedule").filter(pk=ident).first()
        except Exception:
            occurrence = None
        if occurrence is None or (schedule is not None and occurrence.schedule_id != schedule.pk):
            occurrence = None
        if occurrence is None or not permissions.allowed(actor, "view", occurrence.schedule):
            raise CommandError(f"no occurrence {ident!r} that you may see")
        return occurrence

    def _replay(self, options: dict[str, Any]) -> None:
        actor = self._actor(options)
        if options["at"] is not None:
            schedule = self._schedule({**options, "key": options["occurrence"]}, actor)
            occurrence = services.replay_at(
                schedule,
                at=options["at"],
                actor=actor,
                reason=options["reason"],
                now=SystemClock().now(),
            )
        else:
            occurrence = services.replay(
                self._occurrence(options["occurrence"], actor),
                actor=actor,
                reason=options["reason"],
                now=SystemClock().now(),
            )
        data = {
            "occurrence": str(occurrence.pk),
            "scheduled_at": occurrence.scheduled_at.isoformat(),
            "state": occurrence.state,
            "next_attempt": occurrence.attempts + 1,
            "trigger": occurrence.trigger,
        }
        self._emit(
            options,
            data,
            f"replayed {occurrence.pk} (scheduled at {occurrence.scheduled_at.isoformat()}): "
            f"attempt {occurrence.attempts + 1} is due now (trigger manual)",
        )

    def _act(self, options: dict[str, Any], action: Any, **extra: Any) -> Any:
        actor = self._actor(options)
        schedule = self._schedule(options, actor)
        return action(
            schedule, actor=actor, reason=options["reason"], now=SystemClock().now(), **extra
        )

    def _disable(self, options: dict[str, Any]) -> None:
        schedule = self._act(options, services.disable, cancel_running=options["cancel_running"])
        self._emit(
            options,
            {"schedule": str(schedule), "enabled": False},
            f"disabled {schedule}: no replica claims it from its next pass",
        )

    def _enable(self, options: dict[str, Any]) -> None:
        schedule = self._act(options, services.enable)
        self._emit(
            options,
            {"schedule": str(schedule), "enabled": True},
            f"enabled {schedule}: what it missed follows misfire={schedule.misfire}",
        )

    def _run_now(self, options: dict[str, Any]) -> None:
        occurrence = self._act(options, services.run_now)
        self._emit(
            options,
            {"occurrence": str(occurrence.pk), "scheduled_at": occurrence.scheduled_at},
            f"planned {occurrence.pk} at {occurrence.scheduled_at.isoformat()}",
        )

    def _purge(self, options: dict[str, Any]) -> None:
        actor = self._actor(options)
        schedule = self._schedule(options, actor)
        deleted = services.purge(schedule, actor=actor, now=SystemClock().now())
        self._emit(
            options,
            {"schedule": str(schedule), "deleted": deleted},
            f"purged {deleted} finished occurrence(s) of {schedule}",
        )

    def _handlers(self, options: dict[str, Any]) -> None:
        settings = get_settings()
        rows: list[dict[str, Any]] = []
        for handler in registry.all():
            report = conventions.report(handler.func, settings)
            rows.append(
                {
                    "job": handler.name,
                    "module": handler.module,
                    "app": report.app,
                    "dispatches": [
                        {"path": d.path, "kind": d.kind, "app": d.app} for d in report.dispatches
                    ],
                    "departures": [d.rule for d in handler.departures],
                }
            )
        text = "\n".join(
            f"{r['job']} ({r['module']}, app {r['app'] or '-'}): "
            + (
                ", ".join(f"{d['kind']} {d['path']}" for d in r["dispatches"])
                or "dispatches no command or port"
            )
            + (f" [departs from: {', '.join(r['departures'])}]" if r["departures"] else "")
            for r in rows
        )
        self._emit(options, rows, text or "no job handlers registered")

    def _departures(self, options: dict[str, Any]) -> None:
        today = SystemClock().now().date()
        rows = [
            {
                "subject": f"job {handler.name}",
                "where": handler.module,
                "rule": departure.rule,
                "reason": departure.reason,
                "review_by": departure.review_by.isoformat(),
                "due": departure.review_by < today,
            }
            for handler in registry.all()
            for departure in handler.departures
        ] + [
            {
                "subject": f"schedule {declaration.label}",
                "where": declaration.module,
                "rule": declaration.departure.rule,
                "reason": declaration.departure.reason,
                "review_by": declaration.departure.review_by.isoformat(),
                "due": declaration.departure.review_by < today,
            }
            for declaration in declared.all()
            if declaration.departure is not None
        ]
        rows.sort(key=lambda r: (not r["due"], r["review_by"], r["subject"]))
        text = "\n".join(
            f"{'REVIEW DUE ' if r['due'] else ''}{r['subject']} ({r['where']}): departs from "
            f"{r['rule']} until {r['review_by']}: {r['reason']}"
            for r in rows
        )
        self._emit(options, rows, text or "no departures recorded")

    def _runbooks(self, options: dict[str, Any]) -> None:
        rows = Schedule.objects.exclude(status="retired").order_by("tenant", "key")
        if options["key"]:
            rows = rows.filter(key=options["key"])
        if options["tenant"] is not None:
            rows = rows.filter(tenant=options["tenant"])
        sections = [runbooks.markdown(s) for s in rows]
        self.stdout.write("# Runbooks\n\n" + "\n".join(sections) if sections else "no schedules")

    def _sync(self, options: dict[str, Any]) -> None:
        report = services.sync_schedules(declared.all(), now=SystemClock().now())
        if options["json"]:
            self.stdout.write(json.dumps(report.__dict__, indent=2))
            return
        for label in ("created", "updated", "retired"):
            for key in getattr(report, label):
                self.stdout.write(f"{label}: {key}")
        self.stdout.write(f"schedules synced: {report}")

    def _health(self, options: dict[str, Any]) -> None:
        settings = get_settings()
        max_age = options["max_age"] or 3 * settings.HEARTBEAT_SECONDS
        report = services.replica_health(
            host=options["host"] or socket.gethostname(),
            now=SystemClock().now(),
            max_age=timedelta(seconds=max_age),
        )
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2))
        else:
            for replica in report.replicas:
                self.stdout.write(
                    f"{replica.id}: {replica.state}, heartbeat {replica.heartbeat_at.isoformat()}"
                    f" ({'stale' if replica.id in report.stale else 'ok'})"
                )
            retention = report.retention_dict()
            if retention is not None:
                self.stdout.write(
                    f"retention: last pass {retention['last_pass_at']} by "
                    f"{retention['replica']}, deleted {retention['deleted']} "
                    f"({retention['rows_per_second']}/s), lag {retention['lag_seconds']}s"
                )
            for parked in report.parked:
                self.stdout.write(
                    f"parked: {parked['schedule']} ({parked['field']}): {parked['reason']}"
                )
        if not report.healthy:
            raise CommandError(report.problem)
        self.stdout.write(f"healthy: {len(report.replicas)} replica(s) on {report.host}")
