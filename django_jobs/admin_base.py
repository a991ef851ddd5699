"""What the admin's pages share: the confirmation of an action with a reason (saying what it
will do to each object), the buttons that offer a list action on one object's page, the guards
against ids and filters that are not ones, the redacted display of arguments and results, and
the scoping of every page by the schedules a user may view (``permissions.visible``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.views.decorators.http import require_POST

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
    consequence: Callable[[Any], str],
    form_class: type[ReasonForm] = ReasonForm,
) -> HttpResponse | None:
    """Django's two-step confirmation with a reason: show the form, then act on each object.

    The form lists each object with ``consequence(obj)``, what the action will do to it
    (``services.consequences``), so an operator confirms knowing it. ``perform(obj,
    cleaned_data)`` (the form's: ``reason``, and what ``form_class`` adds) calls one service
    and returns a message; refusals are reported, never raised as errors.
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
        "objects": [(obj, consequence(obj)) for obj in queryset],
        "form": form,
        "action": request.POST.get("action"),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "opts": modeladmin.model._meta,
    }
    return TemplateResponse(request, "admin/django_jobs/confirm_action.html", context)


@dataclass(frozen=True)
class ObjectAction:
    """A list action offered as a button on one object's page: the same confirmation, the
    same service and messages, for that object only."""

    slug: str  # its URL, ``<object_id>/<slug>/``, and the button's class ``jobs-<slug>``
    label: str  # the button's text
    action: str  # the ModelAdmin's list action it runs (a method name)
    permission: str  # what ``permissions.allowed`` must grant on the object's schedule
    fits: Callable[[Any], bool]  # whether the object's state is one the action acts on


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


class ReadOnlyAdmin(GuardedAdmin):
    """Rows active staff may see (a subclass may narrow that) and no page adds, changes or
    deletes: interfaces act through services, never through Django's forms."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ScopedAdmin(ReadOnlyAdmin):
    """Querysets limited to what the user may view, through each row's schedule."""

    schedule_path = "schedule"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        visible = permissions.visible(request.user).values("pk")
        return super().get_queryset(request).filter(**{f"{self.schedule_path}__in": visible})

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is None:
            return self.has_module_permission(request)
        schedule = obj if isinstance(obj, Schedule) else getattr(obj, self.schedule_path)
        return permissions.allowed(request.user, "view", schedule)


class ActsOnOneObject(ScopedAdmin):
    """Its ``object_actions`` as buttons on each object's page, each shown only to a user who
    may do it on that object's schedule and only while the object's state fits it. Their
    URLs are POST-only and CSRF-protected (``admin_view``); each goes through the list
    action's own confirmation, service and messages on a one-object queryset, then back to
    the object's page."""

    object_actions: ClassVar[tuple[ObjectAction, ...]] = ()

    def get_urls(self) -> list[URLPattern]:
        """Its buttons' URLs, before the model's own (whose ``<path:object_id>/`` catches all)."""
        buttons = [
            path(
                f"<path:object_id>/{act.slug}/",
                self.admin_site.admin_view(require_POST(partial(self.object_action_view, act=act))),
                name=self._url_name(act.slug),
            )
            for act in self.object_actions
        ]
        return [*buttons, *super().get_urls()]

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> HttpResponse:
        if obj is not None:
            context["object_actions"] = self.offered_actions(request, obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def _url_name(self, slug: str) -> str:
        return f"{self.opts.app_label}_{self.opts.model_name}_{slug.replace('-', '_')}"

    def may(self, request: HttpRequest, obj: Any, act: ObjectAction) -> bool:
        """Whether the user may do ``act`` on ``obj``'s schedule (not on some other one)."""
        schedule = obj if isinstance(obj, Schedule) else getattr(obj, self.schedule_path)
        return permissions.allowed(request.user, act.permission, schedule)

    def offered_actions(self, request: HttpRequest, obj: Any) -> list[dict[str, str]]:
        """The buttons of ``obj``'s page: what the user may do to it that fits its state."""
        return [
            {
                "slug": act.slug,
                "label": act.label,
                "url": reverse(f"admin:{self._url_name(act.slug)}", args=[quote(obj.pk)]),
            }
            for act in self.object_actions
            if act.fits(obj) and self.may(request, obj, act)
        ]

    def object_action_view(
        self, request: HttpRequest, object_id: str, *, act: ObjectAction
    ) -> HttpResponse:
        """The confirmation of ``act`` on one object, then the action, then its page again.

        An object the user may not view is not found (404); one they may view but not act on
        is refused with 403 before anything is shown (the service would refuse it too). The
        state is left to the service, which refuses with a message what no longer fits: it
        may have changed since the page was shown."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(f"no {self.opts.verbose_name} {object_id[:40]!r} that you may view")
        if not self.may(request, obj, act):
            raise PermissionDenied
        back = reverse(
            f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[quote(obj.pk)]
        )
        one = self.get_queryset(request).filter(pk=obj.pk)
        response: HttpResponse | None = getattr(self, act.action)(request, one)
        if response is None:  # done (or refused): its messages show on the object's page
            return HttpResponseRedirect(back)
        if isinstance(response, TemplateResponse) and response.context_data is not None:
            response.context_data.update(original=obj, back_url=back)  # the way back
        return response
