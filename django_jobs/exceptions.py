"""Errors raised by django_jobs. Each message says what to do next."""

from __future__ import annotations


class JobsError(Exception):
    """Base class of every error django_jobs raises on purpose."""


class ConfigurationError(JobsError):
    """A DJANGO_JOBS setting or a declaration is invalid; the message names the field."""


class StoreUnavailable(JobsError):
    """The database cannot be reached. This is an outage of the store, never a job failure."""


class LeaseLost(JobsError):
    """This worker no longer holds the occurrence: its fencing token is stale or the lease expired.

    Stop the work; another replica owns the occurrence now and will complete it.
    """


class Cancelled(JobsError):
    """The run was cancelled (timeout, lost lease or shutdown): stop and return."""


class PermanentFailure(JobsError):
    """Raised by a job handler to dead-letter its occurrence at once, without retries."""


class UnknownJob(JobsError):
    """A schedule names a job that no `@job` handler registered."""


class WorkerLost(JobsError):
    """Recorded (never raised) when an occurrence's lost attempts used up its ``max_attempts``:
    the worker running it stopped before recording an outcome (``store.WORKER_LOST``)."""


class TenantMismatch(JobsError):
    """Recorded (never raised) when an occurrence names another tenant than its schedule's: it
    was not written by django_jobs and is not run (``store.TENANT_MISMATCH``)."""
