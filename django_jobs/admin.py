"""The Django admin console: thin ModelAdmins whose actions call the service layer.

Every page and action is scoped by ``django_jobs.permissions``: a user sees only the schedules
(and their occurrences) they may view, and an action on a schedule they may not act on is
refused, whether it comes from a bulk action, a button on its page (``ActsOnOneObject``) or
an edited URL; each confirmation says what it will do (``services.consequences``). Occurrence
state is read-only; audit records can be neither changed nor deleted, and are scoped by the
schedule and tenant columns each record carries (never by lists of ids).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse

from . import permissions, services, words
from .admin_base import (
    ActsOnOneObject,
    ObjectAction,
    ReasonForm,
    RunNowForm,
    ShowsArguments,
    confirmed_action,
)
from .admin_instants import ShowsInstantsInUtc, utc_text
from .admin_lists import (
    QueueFilter,
    ScheduledFilter,
    ScheduleFilter,
    TenantFilter,
    search_occurrences,
)
from .admin_records import AuditRecordAdmin, ReplicaAdmin, RunbookAdmin
from .console import views as console
from .models import (
    Attempt,
    AuditRecord,
    Occurrence,
    OccurrenceState,
    Runbook,
    Schedule,
    ScheduleStatus,
)
from .models.occurrences import NEWEST_FIRST_GUARD
from .scheduling import rrules, timings

# The read-only pages (audit records, replicas, runbooks) live in admin_records.
__all__ = ["AuditRecordAdmin", "OccurrenceAdmin", "ReplicaAdmin", "RunbookAdmin", "ScheduleAdmin"]

# The newest audit records a schedule's page shows; the rest are one link away.
AUDIT_ON_SCHEDULE_PAGE = 20

# The states each occurrence action acts on (the store refuses the others).
_S = OccurrenceState
REPLAYABLE = frozenset({_S.DEAD, _S.FAILED, _S.SKIPPED, _S.COMPLETED, _S.CANCELLED})
CANCELLABLE = frozenset({_S.SCHEDULED, _S.FAILED, _S.PROCESSING})

# Each schedule action: its confirmation's title, its service, the verb of its message, and
# what it will do (``services.consequences``).
SCHEDULE_ACTIONS: dict[str, tuple[str, Callable[..., Any], str, Callable[[Schedule], str]]] = {
    "disable": ("Disable schedules", services.disable, "Disabled", services.consequences.disable),
    "enable": ("Enable schedules", services.enable, "Enabled", services.consequences.enable),
    "run_now": ("Run now", services.run_now, "Planned a run of", services.consequences.run_now),
}


def replayable(occurrence: Occurrence) -> bool:
    """A finished occurrence, unless its schedule is a retired recurring one (the service
    refuses it: re-declare the schedule first)."""
    schedule = occurrence.schedule
    retired = schedule.status == ScheduleStatus.RETIRED
    return occurrence.state in REPLAYABLE and not (
        retired and schedule.timing_kind not in timings.one_off_kinds()
    )


def runnable(schedule: Schedule) -> bool:
    """Run now needs an active, enabled schedule (the service refuses any other)."""
    return schedule.enabled and schedule.status == ScheduleStatus.ACTIVE


class AttemptInline(ShowsInstantsInUtc, admin.TabularInline):  # type: ignore[type-arg]
    model = Attempt
    fields = [
        "number",
        "fencing_token",
        "replica",
        "trigger",
        "outcome",
        "started_at",
        "finished_at",
        "duration",
        "error_type",
        "error_message",
    ]
    readonly_fields = fields  # type: ignore[assignment]  # every attempt field is read-only
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="duration")
    def duration(self, obj: Attempt) -> str:
        """How long it ran (finished less started), in words; ``-`` while it runs."""
        return words.duration(obj.finished_at - obj.started_at if obj.finished_at else None)


class DeadLetterFilter(admin.SimpleListFilter):
    title = "dead letter"
    parameter_name = "dead"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "dead (poison) only")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(state="dead") if self.value() == "yes" else queryset


@admin.register(Schedule)
class ScheduleAdmin(ShowsArguments, ActsOnOneObject):
    schedule_path = "pk"
    list_display = [
        "__str__",
        "job",
        "status",
        "enabled",
        "next_due_at",
        "planning",
        "last_outcome",
        "lateness",
        "queue",
        "operating_owner",
    ]
    list_filter = ["status", "enabled", "tenant", "queue", "operating_owner"]
    search_fields = ["key", "job", "tenant"]
    actions = ["disable_schedules", "enable_schedules", "run_now"]
    object_actions = (
        ObjectAction("disable", "Disable", "disable_schedules", "disable", lambda s: s.enabled),
        ObjectAction("enable", "Enable", "enable_schedules", "disable", lambda s: not s.enabled),
        ObjectAction("run-now", "Run now", "run_now", "run", runnable),
    )

    def get_urls(self) -> list[URLPattern]:
        """The console's pages (``django_jobs.console.views``), before the model's own: the
        dashboard, the form of a run-time schedule, pausing a tenant."""
        site = self.admin_site.admin_view
        return [
            path("dashboard/", site(self.dashboard_view), name="django_jobs_dashboard"),
            path("tenant/", site(self.tenant_view), name="django_jobs_tenant"),
            path(
                "<path:object_id>/edit/",
                site(self.edit_view),
                name="django_jobs_schedule_edit",
            ),
            *super().get_urls(),
        ]

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        return console.dashboard(self, request)

    def tenant_view(self, request: HttpRequest) -> HttpResponse:
        return console.tenant(self, request)

    def edit_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return console.schedule_form(self, request, object_id)

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """A run-time schedule, made from the console's form through the service layer."""
        return console.schedule_form(self, request, None)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Whether the user may create a schedule in some tenant (``add_schedule``, or a
        ``change`` grant on a tenant); the service checks the tenant the form names."""
        return permissions.may_create_somewhere(request.user)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        newest = Occurrence.objects.filter(schedule=OuterRef("pk")).order_by("-scheduled_at")
        waiting = Occurrence.objects.filter(
            schedule=OuterRef("pk"), state__in=["scheduled", "failed"]
        ).order_by("due_at")
        return services.with_recovery_points(permissions.visible(request.user)).annotate(
            newest_state=Subquery(newest.values("state")[:1]),
            oldest_due=Subquery(waiting.values("due_at")[:1]),
        )

    @admin.display(description="planning", ordering="parked_field")
    def planning(self, obj: Any) -> str:
        """Whether the planner plans it: a parked schedule names the field it refused."""
        return f"parked: {obj.parked_field}" if obj.parked_field else "planned"

    @admin.display(description="last outcome", ordering="newest_state")
    def last_outcome(self, obj: Any) -> str:
        return getattr(obj, "newest_state", None) or "-"

    @admin.display(description="lateness")
    def lateness(self, obj: Any) -> str:
        oldest = getattr(obj, "oldest_due", None)
        late = services.now() - oldest if oldest else None
        if late is None or late.total_seconds() <= 0:
            return "on time"
        return f"{words.duration(late)} late"

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        names = [f.name for f in Schedule._meta.fields]
        # The column keeps the last claimed occurrence after it ended: shown only while it runs.
        fields = self.arguments_shown(
            [n if n != "running_occurrence" else "running" for n in names]
        )
        # The last start and completion, read from the occurrences, beside the planner's
        # recovery point.
        after = fields.index("last_scheduled_at") + 1
        return [*fields[:after], "last_started", "last_completed", *fields[after:], "rule_in_words"]

    @admin.display(description="running occurrence")
    def running(self, obj: Schedule) -> str:
        """The occurrence the overlap guard holds (``running_occurrence``), while it runs."""
        held = obj.running_occurrence
        if held and Occurrence.objects.filter(pk=held, state=OccurrenceState.PROCESSING).exists():
            return str(held)
        return "-"

    @admin.display(description="last started at")
    def last_started(self, obj: Any) -> str:
        """The latest start of an occurrence of it (``services.with_recovery_points``), shown
        as the page shows its other instants (in UTC)."""
        return utc_text(getattr(obj, "last_started_at", None))

    @admin.display(description="last completed at")
    def last_completed(self, obj: Any) -> str:
        """The latest completion of an occurrence of it."""
        return utc_text(getattr(obj, "last_completed_at", None))

    @admin.display(description="calendar rule in words")
    def rule_in_words(self, obj: Schedule) -> str:
        """A calendar rule (``rrule``) as a sentence, beside its RFC 5545 text."""
        if obj.timing_kind != "rrule":
            return "-"
        try:
            return rrules.from_fields(obj).describe()
        except (ValueError, OverflowError) as exc:  # parked by the planner (check E030)
            return f"cannot be evaluated: {exc}"

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        schedule = self.get_object(request, object_id)
        extra = dict(extra_context or {})
        if schedule is not None:
            extra["runbooks"] = list(Runbook.objects.filter(schedule=schedule).order_by("kind"))
            # Its own records and its occurrences' (replays, run-nows): one index range.
            extra["audit"] = list(
                AuditRecord.objects.filter(schedule_id=schedule.pk).order_by("-at", "-id")[
                    :AUDIT_ON_SCHEDULE_PAGE
                ]
            )
            extra["audit_url"] = (
                f"{reverse('admin:django_jobs_auditrecord_changelist')}"
                f"?schedule_id__exact={schedule.pk}"
            )
            # Found among what the user may view, so the service's own check passes.
            extra["summary"] = services.schedule_summary(
                schedule, actor=request.user, now=services.now()
            )
            extra.update(console.editing(request, schedule))
        return super().change_view(request, object_id, form_url, extra)

    def _act(self, request: HttpRequest, queryset: QuerySet[Any], name: str) -> Any:
        """The confirmation of action ``name`` (``SCHEDULE_ACTIONS``), then its service on
        each schedule, each reported with a message."""
        title, service, verb, consequence = SCHEDULE_ACTIONS[name]

        def perform(schedule: Schedule, data: dict[str, Any]) -> str:
            extra = {"args": data["args"]} if data.get("args") is not None else {}
            service(
                schedule, actor=request.user, reason=data["reason"], now=services.now(), **extra
            )
            return f"{verb} {schedule}."

        return confirmed_action(
            self,
            request,
            queryset,
            title=title,
            perform=perform,
            consequence=consequence,
            form_class=RunNowForm if service is services.run_now else ReasonForm,
        )

    def has_disable_permission(self, request: HttpRequest) -> bool:
        return permissions.may_any(request.user, "disable")

    def has_run_permission(self, request: HttpRequest) -> bool:
        return permissions.may_any(request.user, "run")

    @admin.action(
        description="Disable selected schedules (running occurrences finish)",
        permissions=["disable"],
    )
    def disable_schedules(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        return self._act(request, queryset, "disable")

    @admin.action(
        description="Enable selected schedules (misfire policy applies)", permissions=["disable"]
    )
    def enable_schedules(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        return self._act(request, queryset, "enable")

    @admin.action(description="Run selected schedules now", permissions=["run"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        return self._act(request, queryset, "run_now")


@admin.register(Occurrence)
class OccurrenceAdmin(ShowsArguments, ActsOnOneObject):
    list_display = [
        "schedule",
        "scheduled_at",
        "state",
        "queue",
        "skip_reason",
        "trigger",
        "attempts",
        "lease_owner",
        "last_error_type",
    ]
    # Each filter and the count stay cheap at ten million rows (django_jobs.admin_lists): no
    # DISTINCT over the rows, no date_hierarchy aggregates, no exact COUNT(*) of a big list.
    list_filter = [
        DeadLetterFilter,
        "state",
        "trigger",
        ScheduleFilter,
        TenantFilter,
        QueueFilter,
        ScheduledFilter,
    ]
    list_select_related = ["schedule"]
    search_fields = ["id", "schedule__key"]  # read by search_occurrences, not by Django
    search_help_text = "An occurrence's id (exact), or part of a schedule's key (or tenant/key)."
    # Newest first: the index django_jobs_occurrence_newest (migration 0015) walked backwards.
    ordering = ["-scheduled_at", "-id"]
    # Sorting by another column would sort the whole table.
    sortable_by = ["scheduled_at"]
    # Any range of scheduled instants (docs/operations.md): one range of its index.
    declared_lookups = ("scheduled_at__gte", "scheduled_at__lt")
    declared_instants = declared_lookups  # read as UTC when they name no offset
    inlines = [AttemptInline]
    actions = ["replay", "cancel"]
    object_actions = (
        ObjectAction("replay", "Replay", "replay", "replay", replayable),
        ObjectAction("cancel", "Cancel", "cancel", "disable", lambda o: o.state in CANCELLABLE),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # Always true, and what lets the list walk the indexes made for it (NEWEST_FIRST_GUARD).
        return super().get_queryset(request).filter(NEWEST_FIRST_GUARD)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        return search_occurrences(queryset, request.user, search_term), False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = self.arguments_shown([f.name for f in Occurrence._meta.fields])
        after = fields.index("scheduled_at") + 1
        return [*fields[:after], "lateness", "current_attempt", *fields[after:]]

    @admin.display(description="lateness")
    def lateness(self, obj: Occurrence) -> str:
        """Its first attempt's start less its scheduled instant (a retry's backoff is not
        lateness), in words."""
        first = obj.attempt_history.order_by("number").values_list("started_at", flat=True)
        began = first.first() or obj.attempt_started_at or obj.started_at
        return words.duration(began - obj.scheduled_at) if began else "not started"

    @admin.display(description="current attempt")
    def current_attempt(self, obj: Occurrence) -> str:
        """The attempt holding the lease (its row in the attempts below is written when it
        ends): ``attempt 2 running on w1 since 2026-03-01 12:00:30 UTC``."""
        current = obj.current_attempt()
        if current is None:
            return "none"
        doing = "running" if current.outcome == "running" else "claimed, waiting for a thread"
        since = words.instant(current.started_at)
        return f"attempt {current.number} {doing} on {current.replica} since {since}"

    def has_replay_permission(self, request: HttpRequest) -> bool:
        return permissions.may_any(request.user, "replay")

    @admin.action(
        description="Replay selected occurrences (a new attempt, same identity, a fresh retry "
        "budget)",
        permissions=["replay"],
    )
    def replay(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        def perform(occurrence: Occurrence, data: dict[str, Any]) -> str:
            replayed = services.replay(
                occurrence, actor=request.user, reason=data["reason"], now=services.now()
            )
            n = replayed.attempts + 1
            budget = services.consequences.retry_budget(replayed.schedule, n)
            return (
                f"Replayed {occurrence.pk}: attempt {n} is due now. "
                f"The retry budget starts afresh: {budget}."
            )

        return confirmed_action(
            self,
            request,
            queryset,
            title="Replay occurrences",
            perform=perform,
            consequence=lambda o: services.consequences.replay(o, o.schedule),
        )

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return permissions.may_any(request.user, "disable")

    @admin.action(
        description="Cancel selected occurrences (waiting: never run; running: its lease ends)",
        permissions=["cancel"],
    )
    def cancel(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        def perform(occurrence: Occurrence, data: dict[str, Any]) -> str:
            services.cancel(
                occurrence, actor=request.user, reason=data["reason"], now=services.now()
            )
            return f"Cancelled {occurrence.pk}."

        return confirmed_action(
            self,
            request,
            queryset,
            title="Cancel occurrences",
            perform=perform,
            consequence=services.consequences.cancel,
        )
