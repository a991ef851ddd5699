"""System checks with stable ids. Each message names the object and the field; each hint says
what to do. Importing this package registers them (``AppConfig.ready()`` does).

- ``environment``: E001 (PostgreSQL), E002 (USE_TZ), E003 (DJANGO_JOBS), E004 (ON_DEAD);
- ``schedules``: the schedule records, declared and in the database (E010-E019, E030, W023),
  and the ``schedules`` modules that failed to import (E033);
- ``stranded``: active records in the database that nothing will run (W031);
- ``handlers``: job handlers and declarations against the job rules (W020-W028, I021, I029).

Checks read "today" from ``clock.current()``, so a test that injects a clock
(``django_jobs.testing.use_clock``) decides which review and decide-by dates have passed.
"""

from __future__ import annotations

from .environment import check_database, check_settings
from .handlers import check_conventions, check_job_handlers
from .schedules import check_declared_schedules, check_schedule_records, check_schedules_modules
from .stranded import check_stranded_schedules

__all__ = [
    "check_conventions",
    "check_database",
    "check_declared_schedules",
    "check_job_handlers",
    "check_schedule_records",
    "check_schedules_modules",
    "check_settings",
    "check_stranded_schedules",
]
