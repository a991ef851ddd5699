from django.contrib import admin
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.urls import include, path

from django_jobs import enqueue


def enqueue_order(request: HttpRequest) -> HttpResponse:
    """A view that enqueues work for an order in its transaction, and fails after it when
    told to (``?fail=1``): the enqueue must then never run."""
    with transaction.atomic():
        done = enqueue("proc.enqueued", args={"order": int(request.GET["order"])})
        if request.GET.get("fail"):
            raise RuntimeError("the view failed after enqueuing")
    return HttpResponse(str(done.id))


urlpatterns = [
    path("admin/", admin.site.urls),
    path("jobs/", include("django_jobs.urls")),
    path("enqueue-order/", enqueue_order),
]
