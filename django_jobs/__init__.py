"""django_jobs: scheduled jobs for Django with fenced PostgreSQL leases.

The public names are re-exported here as they land; see README.md.
"""

from __future__ import annotations

from .exceptions import JobsError, LeaseLost, PermanentFailure

__all__ = ["JobsError", "LeaseLost", "PermanentFailure"]
