"""The admin's operations console beyond Django's model pages: the dashboard, the form that
creates and edits run-time schedules, and pausing a tenant. An interface: every change goes
through ``django_jobs.services``."""
