"""The console's pages, served by ``ScheduleAdmin.get_urls`` inside the admin (its login,
its look, its permission checks): the dashboard, the form of a run-time schedule, and
pausing or resuming a tenant. Each is a thin interface over ``django_jobs.services``."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from .. import permissions, services
from ..declarations import InvalidSchedule, declared
from ..exceptions import JobsError
from ..models import Origin, Schedule
from ..validation import REASON_MAX_CHARS
from .charts import outcome_chart
from .forms import ScheduleForm


def _page(
    modeladmin: Any, request: HttpRequest, template: str, title: str, **context: Any
) -> TemplateResponse:
    return TemplateResponse(
        request,
        f"admin/django_jobs/{template}",
        {
            **modeladmin.admin_site.each_context(request),
            "title": title,
            "opts": modeladmin.model._meta,
            **context,
        },
    )


def dashboard(modeladmin: Any, request: HttpRequest) -> HttpResponse:
    """The dashboard of what the user may see; ``?window=1h|24h|7d``, ``?page=N``."""
    if not modeladmin.has_module_permission(request):
        raise PermissionDenied
    try:
        page = int(request.GET.get("page", "1"))
    except ValueError:
        page = 1
    report = services.dashboard(
        actor=request.user,
        now=services.now(),
        window=request.GET.get("window", services.dashboard_window),
        page=page,
    )
    return _page(
        modeladmin,
        request,
        "dashboard.html",
        "Scheduled jobs: dashboard",
        report=report,
        chart=outcome_chart(report.buckets),
        windows=list(services.DASHBOARD_WINDOWS),
        may_pause=permissions.may_any(request.user, "disable"),
    )


def declared_in(schedule: Schedule) -> str:
    """Where a schedule declared in code is declared: its ``schedules`` module, as this
    process imported it (``app.schedules``), or the app's ``schedules.py`` if it did not."""
    found = declared.get(schedule.tenant, schedule.key)
    return found.module if found is not None and found.module else "its app's schedules.py"


def editing(request: HttpRequest, schedule: Schedule) -> dict[str, str]:
    """What a schedule's page says about changing it: where a declared one is declared
    (``declared_in``), or the link to a run-time one's form for a user who may change it
    (``edit_url``)."""
    if schedule.origin == Origin.CODE:
        return {"declared_in": declared_in(schedule)}
    if schedule.origin == Origin.RUNTIME and permissions.allowed(request.user, "change", schedule):
        return {"edit_url": reverse("admin:django_jobs_schedule_edit", args=[schedule.pk])}
    return {}


def schedule_form(modeladmin: Any, request: HttpRequest, object_id: str | None) -> HttpResponse:
    """Create a run-time schedule (``object_id`` None) or change one, through
    ``services.upsert_schedule``; a schedule declared in code is refused here, naming where
    it is declared."""
    record = None
    if object_id is not None:
        record = modeladmin.get_object(request, object_id)
        if record is None or not permissions.allowed(request.user, "view", record):
            raise PermissionDenied
        if record.origin == Origin.CODE:
            modeladmin.message_user(
                request,
                f"{record} is declared in code ({declared_in(record)}): change it there and "
                "deploy; jobs sync writes it.",
                messages.ERROR,
            )
            return HttpResponseRedirect(_change_url(record))
        if not permissions.allowed(request.user, "change", record):
            raise PermissionDenied
    elif not modeladmin.has_add_permission(request):
        raise PermissionDenied
    form = ScheduleForm(request.POST if request.method == "POST" else None, record=record)
    if request.method == "POST" and form.is_valid():
        assert form.declaration is not None
        try:
            saved = services.upsert_schedule(
                form.declaration,
                actor=request.user,
                reason=form.cleaned_data["reason"],
                now=services.now(),
            )
        except InvalidSchedule as exc:
            form.refuse(exc)
        except JobsError as exc:
            form.add_error(None, str(exc))
        else:
            verb = "Saved" if record is not None else "Created"
            modeladmin.message_user(request, f"{verb} {saved}.")
            return HttpResponseRedirect(_change_url(saved))
    title = f"Change {record}" if record is not None else "Add a run-time schedule"
    return _page(
        modeladmin,
        request,
        "schedule/schedule_form.html",
        title,
        form=form,
        record=record,
        sections=form.sections(),
    )


def _change_url(schedule: Schedule) -> str:
    return reverse("admin:django_jobs_schedule_change", args=[schedule.pk])


class TenantForm(forms.Form):
    tenant = forms.CharField(required=False, max_length=100)
    action = forms.ChoiceField(choices=[("pause", "Pause"), ("resume", "Resume")])
    reason = forms.CharField(
        max_length=REASON_MAX_CHARS,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Why? Kept in the audit record of each schedule.",
    )


def tenant(modeladmin: Any, request: HttpRequest) -> HttpResponse:
    """Pause (disable every schedule) or resume a whole tenant, with a reason:
    ``services.pause_tenant`` and ``resume_tenant``. ``?tenant=&action=`` fill the form."""
    if not permissions.may_any(request.user, "disable"):
        raise PermissionDenied
    form = TenantForm(request.POST if request.method == "POST" else None, initial=request.GET)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        act = services.pause_tenant if data["action"] == "pause" else services.resume_tenant
        try:
            done = act(
                data["tenant"], actor=request.user, reason=data["reason"], now=services.now()
            )
        except JobsError as exc:
            form.add_error(None, str(exc))
        else:
            verb = "Paused" if data["action"] == "pause" else "Resumed"
            names = ", ".join(str(s) for s in done)
            modeladmin.message_user(request, f"{verb} tenant {data['tenant']!r}: {names}.")
            return HttpResponseRedirect(reverse("admin:django_jobs_dashboard"))
    return _page(modeladmin, request, "tenant.html", "Pause or resume a tenant", form=form)
