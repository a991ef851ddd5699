"""The admin's read-only pages: audit records (never changed nor deleted, scoped by the
schedule and tenant columns each carries), the fleet's replicas (``view_replica``), and each
schedule's runbooks (scoped by its schedule)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from . import permissions
from .admin_base import ReadOnlyAdmin, ScopedAdmin, redacted
from .admin_lists import AuditActionFilter, TenantFilter
from .models import AuditRecord, Replica, Runbook


@admin.register(AuditRecord)
class AuditRecordAdmin(ReadOnlyAdmin):
    """Every record the user may see, newest first: filtered by the ``schedule_id`` and
    ``tenant`` columns (``permissions.visible_audit``), so neither a huge occurrence table
    nor a removed schedule hides one. ``?schedule_id__exact=<id>`` lists one schedule's."""

    list_display = [
        "at",
        "actor",
        "actor_id",
        "action",
        "tenant",
        "schedule_id",
        "target_type",
        "target_id",
        "reason",
    ]
    # Neither reads the never-purged table for its choices (a DISTINCT per filter did).
    list_filter = [AuditActionFilter, TenantFilter]
    # One schedule's records: the link on each schedule's page (index django_jobs_audit_schedule).
    declared_lookups = ("schedule_id__exact",)
    search_fields = ["actor", "reason", "target_id"]
    ordering = ["-at", "-id"]
    list_per_page = 100
    exclude = ["before", "after"]  # shown redacted instead: ``before_shown``, ``after_shown``

    def get_queryset(self, request: HttpRequest) -> QuerySet[AuditRecord]:
        return permissions.visible_audit(request.user).order_by("-at", "-id")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        shown = {"before": "before_shown", "after": "after_shown"}
        return [shown.get(f.name, f.name) for f in AuditRecord._meta.fields]

    @admin.display(description="before")
    def before_shown(self, obj: AuditRecord) -> str:
        """What the action changed, as it was: a job's arguments among it, redacted."""
        return redacted(obj.before)

    @admin.display(description="after")
    def after_shown(self, obj: AuditRecord) -> str:
        return redacted(obj.after)


@admin.register(Replica)
class ReplicaAdmin(ReadOnlyAdmin):
    """The fleet: every replica's host, process and heartbeat. Not a tenant's to see: staff
    need ``django_jobs.view_replica`` (a permission of its own, model-wide)."""

    list_display = [
        "id",
        "host",
        "pid",
        "state",
        "heartbeat_at",
        "concurrency",
        "running",
        "served_queues",
    ]
    list_filter = ["state", "host"]

    @admin.display(description="queues")
    def served_queues(self, obj: Replica) -> str:
        """The queues it serves (``runworker --queue NAME[:N]``), each with its threads;
        "every queue" for a replica started without ``--queue``."""
        queues = obj.queues if isinstance(obj.queues, list) else []
        if not queues:
            return "every queue"
        return ", ".join(f"{q.get('name')}:{q.get('concurrency')}" for q in queues)

    def has_module_permission(self, request: HttpRequest) -> bool:
        user = request.user
        return bool(user.is_active and user.is_staff and user.has_perm("django_jobs.view_replica"))


@admin.register(Runbook)
class RunbookAdmin(ScopedAdmin):
    list_display = ["schedule", "kind", "interface"]
    list_filter = ["kind"]
