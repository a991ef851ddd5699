"""What the admin's pages share: the confirmation of an action with a reason, the guards
against ids and filters that are not ones, the redacted display of arguments and results, and
the scoping of every page by the schedules a user may view (``permissions.visible``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from . import permissions
from .admin_instants import ShowsInstantsInUtc
from .admin_lists import BoundedChangeList, EstimatedCountPaginator, lookup_declared
from .conf import get_settings
from .exceptions import JobsError
from .models import Occurrence, Schedule
from .safe_error import shown_json
from .validation import REASON_MAX_CHARS, arguments, json_text, storable


class ReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=REASON_MAX_CHARS,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Why? Kept in the audit record.",
    )


class RunNowForm(ReasonForm):
    """Run now, with arguments of its own for the run (optional)."""

    args = forms.CharField(
        label="Arguments",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="A JSON object the run gets as run.args instead of the schedule's "
        "(empty: the schedule's). Kept in the audit record.",
    )

    def clean_args(self) -> dict[str, Any] | None:
        return json_arguments(self.cleaned_data["args"])


def json_arguments(text: str) -> dict[str, Any] | None:
    """A job's arguments typed in a form: a JSON object, checked as a declaration's are;
    None for nothing typed. Refused with ``arguments: <why>``."""
    if not text.strip():
        return None
    value, problem = json_text(text)  # nesting bounded before parsing
    if problem is not None:
        raise forms.ValidationError(f"arguments: {problem}")
    kept, problem = arguments(value)
    if problem is not None:
        raise forms.ValidationError(f"arguments: {problem}")
    return kept


def confirmed_action(
    modeladmin: admin.ModelAdmin,  # type: ignore[type-arg]
    request: HttpRequest,
    queryset: QuerySet[Any],
    *,
    title: str,
    perform: Callable[[Any, dict[str, Any]], str],
    form_class: type[ReasonForm] = ReasonForm,
) -> HttpResponse | None:
    """Django's two-step confirmation with a reason: show the form, then act on each object.

    ``perform(obj, cleaned_data)`` (the form's: ``reason``, and what ``form_class`` adds)
    calls one service and returns a message; refusals are reported, never raised as errors.
    """
    form = form_class(request.POST if "confirm" in request.POST else None)
    if "confirm" in request.POST and form.is_valid():
        done = 0
        for obj in queryset:
            try:
                modeladmin.message_user(request, perform(obj, form.cleaned_data))
                done += 1
            except JobsError as exc:
                modeladmin.message_user(request, str(exc), messages.ERROR)
        if done == 0:
            modeladmin.message_user(request, "Nothing was changed.", messages.WARNING)
        return None
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "objects": list(queryset),
        "form": form,
        "action": request.POST.get("action"),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "opts": modeladmin.model._meta,
    }
    return TemplateResponse(request, "admin/django_jobs/confirm_action.html", context)


class GuardedAdmin(ShowsInstantsInUtc, admin.ModelAdmin):  # type: ignore[type-arg]
    """Every django_jobs ModelAdmin. Refuses, with a message, what would otherwise reach the
    database and fail there: a selected id that is not one (``abc``, ``1 OR 1=1``), a NUL byte
    in a list filter. Its list takes only its declared filters' parameters, anything else a
    400 (``admin_lists.BoundedChangeList``), and is never counted whole
    (``EstimatedCountPaginator``, no full count, no facet counts). Every instant is shown in
    UTC (``admin_instants``)."""

    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # a facet is a count per choice over the rows
    # Query-string lookups a list takes besides its filters' own parameters: those a page
    # links to (``?schedule_id__exact=``) or the docs name. Never one on a field a page shows
    # redacted, nor an unindexed one.
    declared_lookups: ClassVar[tuple[str, ...]] = ()

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[BoundedChangeList]:
        return BoundedChangeList

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        """Only a declared filter's parameter (Django allows any lookup on the model's own
        fields: ``?args__api_token__startswith=a`` read a redacted value back)."""
        return lookup_declared(self, lookup, request)

    def response_action(  # Django 6 adds an argument: passed on
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> HttpResponse | None:
        pk = self.model._meta.pk
        assert pk is not None
        for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
            try:
                pk.to_python(value)
            except ValidationError:
                self.message_user(
                    request,
                    f"{value[:40]!r} is not the id of a {self.model._meta.verbose_name}: "
                    "nothing was changed.",
                    messages.ERROR,
                )
                return None
        return super().response_action(request, queryset, *args, **kwargs)

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        if not all(storable(item) for pair in request.GET.lists() for item in [pair[0], *pair[1]]):
            # PostgreSQL refuses NUL in text: Django's own answer to a bad lookup.
            raise IncorrectLookupParameters("a NUL byte in the query")
        return super().get_changelist_instance(request)


def redacted(value: object) -> str:
    """A job's arguments (or an audit record's change) as the page shows them: JSON, with what
    the secret patterns and ``REDACT_PATTERNS`` match hidden; ``-`` for nothing."""
    if value is None:
        return "-"
    return shown_json(value, get_settings().REDACT_PATTERNS)


# JSON fields a page shows redacted, never raw: the field, and what shows it instead.
_REDACTED_FIELDS = {"args": "arguments", "result": "returned"}


class ShowsArguments:
    """A page of a model with arguments (``args``), and an occurrence's ``result``: they are
    shown redacted (``arguments``, ``returned``), never as the raw field."""

    exclude: ClassVar[list[str] | tuple[str, ...] | None] = list(_REDACTED_FIELDS)

    @staticmethod
    def arguments_shown(fields: list[str]) -> list[str]:
        """The model's read-only fields, each JSON field by what shows it redacted."""
        return [_REDACTED_FIELDS.get(name, name) for name in fields]

    @admin.display(description="arguments")
    def arguments(self, obj: Schedule | Occurrence) -> str:
        return redacted(obj.args)

    @admin.display(description="result")
    def returned(self, obj: Occurrence) -> str:
        """What the handler returned, with the completion."""
        return redacted(obj.result)


class ScopedAdmin(GuardedAdmin):
    """Querysets limited to what the user may view, through each row's schedule."""

    schedule_path = "schedule"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        visible = permissions.visible(request.user).values("pk")
        return super().get_queryset(request).filter(**{f"{self.schedule_path}__in": visible})

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is None:
            return self.has_module_permission(request)
        schedule = obj if isinstance(obj, Schedule) else getattr(obj, self.schedule_path)
        return permissions.allowed(request.user, "view", schedule)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
