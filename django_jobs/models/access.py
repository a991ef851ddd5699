"""Who may act on a tenant's schedules (``TenantGrant``) and who did what (``AuditRecord``)."""

from __future__ import annotations

from django.db import models


class AuditRecord(models.Model):
    """Who did what to which schedule or occurrence, why, and what changed. Never edited."""

    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField()
    # The username when it acted (what a reader recognises) and the user's primary key (what
    # identifies them: a username can be renamed or reused). No actor id for the system's own
    # actors (``django_jobs.sync``, ``.planner``, ``.retention``). Text, not a foreign key:
    # records outlive the user, and AUTH_USER_MODEL's key need not be an integer. NULL, not
    # "", says "no user": the way Django's own admin LogEntry keeps object ids.
    actor = models.CharField(max_length=200)
    actor_id = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001
    action = models.CharField(max_length=50)
    tenant = models.CharField(max_length=100, blank=True, default="")
    # The schedule the record concerns, its own or its occurrence's: what the admin scopes
    # and filters records by. A plain integer, not a foreign key: the records of a removed
    # schedule stay. Null only for records older than the column whose occurrence was gone.
    schedule_id = models.BigIntegerField(null=True, blank=True)
    target_type = models.CharField(max_length=50)
    target_id = models.CharField(max_length=100)
    reason = models.TextField()
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["target_type", "target_id", "at"]),
            # The Audit list, newest first, and one schedule's records (its change page, the
            # list filtered to it): both read in index order, whatever the table's size.
            models.Index(fields=["-at", "-id"], name="django_jobs_audit_newest"),
            models.Index(fields=["schedule_id", "-at", "-id"], name="django_jobs_audit_schedule"),
            models.Index(fields=["tenant", "-at", "-id"], name="django_jobs_audit_tenant"),
        ]
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} {self.target_type}:{self.target_id} by {self.actor}"


class TenantGrant(models.Model):
    """A permission on every schedule of a tenant, for the members of a group: how staff of one
    tenant are scoped to it (object permissions on single schedules come from guardian)."""

    group = models.ForeignKey("auth.Group", on_delete=models.CASCADE, related_name="tenant_grants")
    tenant = models.CharField(max_length=100)
    permission = models.CharField(max_length=30)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["group", "tenant", "permission"], name="django_jobs_tenant_grant"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.group} may {self.permission} in tenant {self.tenant}"
