"""django_jobs' own URLs: include them where you like,
``path("jobs/", include("django_jobs.urls"))``.

- ``metrics`` (``django_jobs:metrics``): the fleet's Prometheus metrics (``metrics.py``), for
  an active staff user holding ``django_jobs.view_schedule`` model-wide, or a request bearing
  ``Authorization: Bearer <DJANGO_JOBS["METRICS_TOKEN"]>``. The metrics are fleet-wide and
  name no tenant, so object and tenant grants do not admit a user to them.
"""

from __future__ import annotations

import hmac

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .conf import get_settings
from .metrics import fleet_registry

app_name = "django_jobs"

REGISTRY = fleet_registry()
# The permission that admits a staff session: viewing every schedule (model-wide).
VIEW_ALL = "django_jobs.view_schedule"


def bearer_token(request: HttpRequest) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (None without one)."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def token_matches(token: str) -> bool:
    """Whether ``token`` is the configured metrics token (none configured: never)."""
    expected = get_settings().METRICS_TOKEN
    if expected is None:
        return False
    return hmac.compare_digest(token.encode(), expected.encode())


def refused(status: int, reason: str) -> HttpResponse:
    response = HttpResponse(reason + "\n", status=status, content_type="text/plain")
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="django_jobs metrics"'
    return response


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The fleet's metrics in Prometheus' text format, read from the database now."""
    token = bearer_token(request)
    if token is not None:
        if not token_matches(token):
            return refused(401, "the bearer token is not the metrics token")
    elif not request.user.is_authenticated:
        return refused(401, "log in as staff or send the metrics token as a bearer token")
    elif not (request.user.is_active and request.user.is_staff and request.user.has_perm(VIEW_ALL)):
        return refused(403, f"the metrics need a staff user with {VIEW_ALL} on every schedule")
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


urlpatterns = [path("metrics", metrics, name="metrics")]
