"""The admin, for the admin pages scenario (``bench/perf/adminpages.py``)."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
