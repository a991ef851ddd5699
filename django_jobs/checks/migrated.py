"""Whether the database holds every migration of django_jobs: the database checks read the
stored records with this release's models, and ``migrate`` runs them before it migrates. On
a database a migration behind (an upgrade's ``migrate``), a query would name columns that
are not there yet and fail ``migrate`` itself; they wait for the next ``check --database``.
"""

from __future__ import annotations

from django.db import connection
from django.db.migrations.loader import MigrationLoader


def migrated() -> bool:
    """Whether every migration of django_jobs on disk is applied to ``default``."""
    loader = MigrationLoader(connection, ignore_no_migrations=True)
    ours = {key for key in loader.disk_migrations if key[0] == "django_jobs"}
    return ours <= set(loader.applied_migrations or ())
