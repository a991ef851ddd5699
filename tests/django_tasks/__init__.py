"""Django's own Tasks contract suite, kept as ours (issue #36).

Adapted from Django 6.1.3's tests/tasks/ (BSD-3-Clause, LICENSE.django) to run against
``django_jobs.tasks.JobsBackend``, every task run by our worker: inline passes on the test's
clock, and real ``runworker --once`` processes for a subset (test_worker_processes.py). The
same suite runs on Django 6 (``django.tasks``) and on Django 5.2 with the ``django_tasks``
backport (``framework.py``).
"""
