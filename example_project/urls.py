from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    # The fleet's Prometheus metrics at /jobs/metrics (docs/operations.md, "Metrics").
    path("jobs/", include("django_jobs.urls")),
]
