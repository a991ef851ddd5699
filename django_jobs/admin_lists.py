"""The admin's lists at ten million rows: filters, search and a count that stay cheap, and a
query string that can ask only what the list's filters ask.

Django's defaults each read the whole table on every page at that size: the exact
``COUNT(*)`` of the paginator, a ``SELECT DISTINCT`` per field filter whose choices come from
the rows (an occurrence's ``tenant``, an audit record's ``action`` and ``tenant``),
``date_hierarchy``'s ``dates()`` aggregates, and a search that casts every id to text. And a
ChangeList applies any lookup on the model's own fields that the query string names
(``?args__api_token__startswith=a``): a page that shows a value redacted would confirm it one
character at a time, and an unindexed lookup scans the table. Here instead:

- every list's count is PostgreSQL's estimate (``EXPLAIN``) when that is large, shown as
  "about N", and exact (bounded) when it is small: ``EstimatedCountPaginator``,
  ``BoundedChangeList``;
- a list takes only the parameters of its declared filters (and ``declared_lookups``, the
  few a page links to); anything else is refused with a 400 (``lookup_declared``,
  ``BoundedChangeList``);
- tenants and schedules are listed from the schedules the user may see, never from the rows:
  ``TenantFilter``, ``ScheduleFilter`` (and queues from those schedules and the newest
  occurrences: ``QueueFilter``); an audit record's actions from the newest records, a
  bounded read: ``AuditActionFilter``;
- dates are ranges relative to now (``ScheduledFilter``), each one index range;
- a search is an exact id, or schedules whose key matches: ``search_occurrences``.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib import admin
from django.contrib.admin.exceptions import DisallowedModelAdminLookup
from django.contrib.admin.filters import SimpleListFilter
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property

from . import permissions, services

# Below this many rows, as PostgreSQL estimates them, a list's count is exact: a count bounded
# by a LIMIT of one more, so a wrong estimate costs at most that many rows read.
EXACT_COUNT_BELOW = 10_000
# A schedule filter lists at most this many schedules; beyond it, a schedule is chosen by its
# link (``?schedule__id__exact=<id>``) or by searching its key.
SCHEDULE_CHOICES = 50
# A tenant filter lists at most this many tenants (in order); another is chosen by its URL.
TENANT_CHOICES = 100
# The occurrences list's queue filter offers the queues of at most this many of the newest
# occurrences the user may see (besides their schedules' queues): a bounded read of the
# newest-first index, never a DISTINCT over the table.
QUEUE_SAMPLE = 1000
# The audit list's action filter offers the actions of at most this many of the newest records
# the user may see: a bounded read of the newest-first index, never a DISTINCT over the table.
AUDIT_ACTION_SAMPLE = 1000


def planned_rows(queryset: QuerySet[Any]) -> int:
    """How many rows PostgreSQL's planner expects ``queryset`` to return (its ``EXPLAIN``):
    no row is read."""
    text = queryset.order_by().explain(format="json")
    if not text:  # a query Django knows matches nothing (an id beyond bigint) is not run
        return 0
    plan = json.loads(text)
    return int(plan[0]["Plan"]["Plan Rows"])


class EstimatedCountPaginator(Paginator):  # type: ignore[type-arg]
    """A paginator whose count is the planner's estimate when that is at least
    ``EXACT_COUNT_BELOW`` (``estimated`` is then true), and exact below it."""

    estimated = False

    @cached_property
    def count(self) -> int:
        queryset: QuerySet[Any] = self.object_list  # type: ignore[assignment]  # the admin's
        estimate = planned_rows(queryset)
        if estimate >= EXACT_COUNT_BELOW:
            self.estimated = True
            return estimate
        # The estimate can be far off (a rare value, a skewed schedule): bounded, so a wrong
        # one costs at most EXACT_COUNT_BELOW + 1 rows read, never the whole table.
        exact: int = queryset.order_by()[: EXACT_COUNT_BELOW + 1].count()
        if exact > EXACT_COUNT_BELOW:
            self.estimated = True
            return max(estimate, exact)
        return exact


def lookup_declared(model_admin: Any, lookup: str, request: HttpRequest | None) -> bool:
    """Whether a list's query string may carry ``lookup``: a ``SimpleListFilter``'s
    parameter, one of the admin's ``declared_lookups``, or a lookup on a field a field filter
    names (``status__exact``, ``tenant``). ``BoundedChangeList`` then refuses what no filter took
    (``status__regex``): this is the first gate, that one the exact one."""
    if lookup in getattr(model_admin, "declared_lookups", ()):
        return True
    for item in model_admin.get_list_filter(request):
        if isinstance(item, type) and issubclass(item, SimpleListFilter):
            if lookup == item.parameter_name:
                return True
            continue
        path = item[0] if isinstance(item, list | tuple) else item
        if isinstance(path, str) and (lookup == path or lookup.startswith(f"{path}__")):
            return True
    return False


def _utc_instant(key: str, value: str) -> datetime:
    """A declared range bound of a list (``?scheduled_at__gte=``) as an aware instant: an ISO
    date or date-time, read as UTC when it names no offset, so no list depends on the
    configured zone. Anything else redirects with ``?e=1``, as a bad filter value does."""
    try:
        instant = datetime.fromisoformat(value.strip())
    except ValueError as error:
        raise IncorrectLookupParameters(f"{key}: not an ISO date or date-time") from error
    return instant if instant.tzinfo is not None else instant.replace(tzinfo=UTC)


class BoundedChangeList(ChangeList):
    """Every django_jobs list: its query string filters only through its declared filters,
    and its count says when it is an estimate (``count_estimated``), made exact when the page
    shows the end of the list (fewer rows than a page).

    A parameter that none of the list's filters took, and that is none of the admin's
    ``declared_lookups``, is refused: ``DisallowedModelAdminLookup``, a
    ``SuspiciousOperation``, which Django answers with a 400. Django itself would apply it as
    a lookup on the model's own fields."""

    count_estimated = False

    def get_filters(self, request: HttpRequest) -> Any:
        specs, has_filters, remaining, duplicates, active = super().get_filters(request)
        declared = getattr(self.model_admin, "declared_lookups", ())
        undeclared = sorted(key for key in remaining if key not in declared)
        if undeclared:
            raise DisallowedModelAdminLookup(
                f"{self.opts.verbose_name_plural}: filtering by {undeclared[0][:80]!r} is not "
                "allowed: not a filter of this list"
            )
        lookups: dict[str, Any] = remaining  # Django's own: each parameter's values, a list
        for key in lookups.keys() & set(getattr(self.model_admin, "declared_instants", ())):
            lookups[key] = [_utc_instant(key, value) for value in lookups[key]]
        return specs, has_filters, lookups, duplicates, active

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        paginator = self.paginator
        self.count_estimated = bool(getattr(paginator, "estimated", False))
        if not self.count_estimated:
            return
        shown = len(self.result_list)  # the page's query, run once: the template reuses it
        if shown < self.list_per_page:
            exact = (self.page_num - 1) * self.list_per_page + shown
            paginator.count = exact  # the cached value
            paginator.estimated = False
            self.result_count, self.count_estimated = exact, False
            self.multi_page = self.page_num > 1


class TenantFilter(admin.SimpleListFilter):
    """The tenants of the schedules the user may see (the schedule table, never a DISTINCT
    over occurrences or audit records), at most ``TENANT_CHOICES`` and the one chosen; the
    rows' own ``tenant`` column is filtered."""

    title = "tenant"
    parameter_name = "tenant"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        tenants = list(
            permissions.visible(request.user)
            .exclude(tenant="")
            .order_by("tenant")
            .values_list("tenant", flat=True)
            .distinct()[:TENANT_CHOICES]
        )
        chosen = self.value()
        if chosen and chosen not in tenants:
            tenants.append(chosen)
        return [(tenant, tenant) for tenant in tenants]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(tenant=value) if value else queryset


class ScheduleFilter(admin.SimpleListFilter):
    """One schedule's occurrences (``?schedule__id__exact=<id>``): the schedules the user may
    see are listed while there are at most ``SCHEDULE_CHOICES``; beyond that, only the one
    chosen (by a link or an edited URL), so the filter can still be cleared."""

    title = "schedule"
    parameter_name = "schedule__id__exact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        visible = permissions.visible(request.user).order_by("tenant", "key")
        listed = list(visible[: SCHEDULE_CHOICES + 1])
        if len(listed) > SCHEDULE_CHOICES:
            chosen = self.chosen()
            listed = list(visible.filter(pk=chosen)) if chosen is not None else []
        return [(str(schedule.pk), str(schedule)) for schedule in listed]

    def chosen(self) -> int | None:
        value = self.value()
        if not value:
            return None
        try:
            return int(value)
        except ValueError:
            raise IncorrectLookupParameters(
                f"schedule__id__exact: {value[:40]!r} is not a schedule id"
            ) from None

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        chosen = self.chosen()
        return queryset if chosen is None else queryset.filter(schedule_id=chosen)


class AuditActionFilter(admin.SimpleListFilter):
    """An audit record's action: those of the newest ``AUDIT_ACTION_SAMPLE`` records the user
    may see (and the one chosen), read in the order of the newest-first index; any action
    can be asked for by URL (``?action=purge``)."""

    title = "action"
    parameter_name = "action"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        newest = model_admin.get_queryset(request).values_list("action", flat=True)
        actions = set(newest[:AUDIT_ACTION_SAMPLE])
        chosen = self.value()
        if chosen:
            actions.add(chosen)
        return [(action, action) for action in sorted(actions)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(action=value) if value else queryset


class QueueFilter(admin.SimpleListFilter):
    """An occurrence's queue (``?queue=<name>``): the queues of the schedules the user may see
    and of the newest ``QUEUE_SAMPLE`` occurrences the list shows them (enqueued work may be on
    another queue than its policy record's), and the one chosen; any queue can be asked for by
    URL. Nothing beyond what the list itself would show."""

    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        queues = set(
            permissions.visible(request.user)
            .order_by()
            .values_list("queue", flat=True)
            .distinct()[:TENANT_CHOICES]
        )
        newest = model_admin.get_queryset(request).order_by(*model_admin.ordering)
        queues.update(newest.values_list("queue", flat=True)[:QUEUE_SAMPLE])
        chosen = self.value()
        if chosen:
            queues.add(chosen)
        return [(queue, queue) for queue in sorted(queues)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(queue=value) if value else queryset


def _day_start(at: datetime) -> datetime:
    """The start of ``at``'s day in UTC: nothing here depends on the server's or Django's zone."""
    return at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def _month(at: datetime) -> tuple[datetime, datetime]:
    """``at``'s month in UTC: its first instant, and the next month's."""
    first = _day_start(at).replace(day=1)
    return first, (first + timedelta(days=32)).replace(day=1)


# Each choice of ScheduledFilter: (value, label, the range [from, to) given now; None: open).
_RANGES: list[tuple[str, str, Any]] = [
    ("1h", "Past hour", lambda now: (now - timedelta(hours=1), now)),
    ("24h", "Past 24 hours", lambda now: (now - timedelta(hours=24), now)),
    ("today", "Today", lambda now: (_day_start(now), _day_start(now) + timedelta(days=1))),
    ("7d", "Past 7 days", lambda now: (now - timedelta(days=7), now)),
    ("month", "This month", lambda now: _month(now)),
    ("ahead", "Planned ahead", lambda now: (now, None)),
]


class ScheduledFilter(admin.SimpleListFilter):
    """When occurrences were (or are) scheduled, relative to now (``services.now()``): each
    choice is one range of the ``scheduled_at`` index. Days and months are UTC's (nothing in
    django_jobs depends on a configured zone). Any range: ``?scheduled_at__gte=...``
    and ``?scheduled_at__lt=...``."""

    title = "scheduled"
    parameter_name = "scheduled"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, label) for value, label, _ in _RANGES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        ranges = {choice: bounds for choice, _, bounds in _RANGES}
        if value not in ranges:
            raise IncorrectLookupParameters(f"scheduled: {value[:40]!r} is not a choice")
        low, high = ranges[value](services.now())
        queryset = queryset.filter(scheduled_at__gte=low)
        return queryset if high is None else queryset.filter(scheduled_at__lt=high)


def search_occurrences(queryset: QuerySet[Any], user: Any, term: str) -> QuerySet[Any]:
    """Occurrences matching a search: an occurrence id (a UUID: exact), else the occurrences
    of the schedules the user may see whose key contains ``term`` (``tenant/key``: that
    tenant's). Never a scan of every id as text; a term that is no id is no error."""
    term = term.strip()
    if not term:
        return queryset
    try:
        return queryset.filter(pk=uuid.UUID(term))
    except ValueError:
        pass
    tenant, _, key = term.partition("/")
    matching = Q(key__icontains=term)
    if tenant:
        matching |= Q(tenant=tenant, key__icontains=key)
    schedules = permissions.visible(user).filter(matching).values("pk")
    return queryset.filter(schedule__in=schedules)
