"""django_jobs settings: the only module that reads `django.conf.settings`.

All settings live in one dict, ``DJANGO_JOBS``. Values are read at access time, so
``override_settings(DJANGO_JOBS={...})`` takes effect at once in tests. Every key, its default
and its meaning: docs/worker.md, "Settings" (``JobsSettings`` below holds the same keys and
defaults; tests/test_settings_table.py keeps the two equal).

``PAUSED_SCHEDULES`` entries: tenants cannot hold ``/`` and keys can, so an entry with a ``/``
splits at its first one into tenant and key (``"acme/reports/daily"`` is key
``reports/daily`` of tenant ``acme``). It also pauses a schedule whose whole key is the entry,
in every tenant: ``"reports/daily"`` pauses that key everywhere as well as key ``daily`` of
tenant ``reports`` (the kill switch errs towards pausing). The default tenant (``""``) has no
tenant form: ``"/key"`` is refused; write the bare key, which pauses it in every tenant.
Keys and tenants hold no ``*``, so ``*`` is accepted only as ``"*"`` and ``"<tenant>/*"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any

from django.conf import settings as django_settings

from .exceptions import ConfigurationError


@dataclass(frozen=True)
class JobsSettings:
    LEASE_SECONDS: float = 30
    CLAIM_BATCH_SIZE: int = 50
    CLAIM_AHEAD: int = 16
    PLAN_BATCH_SIZE: int = 500
    PLAN_AHEAD_SECONDS: float = 30
    SHUTDOWN_GRACE_SECONDS: float = 30
    TIMEOUT_GRACE_SECONDS: float = 10
    HEARTBEAT_SECONDS: float = 5
    POLL_SECONDS: float = 5.0
    ERROR_MESSAGE_MAX_CHARS: int = 1000
    PURGE_BATCH_SIZE: int = 1000
    RETENTION_SECONDS: float = 60
    RETENTION_BUDGET_SECONDS: float = 10
    ONE_OFF_KEEP_SECONDS: float = 7 * 24 * 3600
    PAUSED_SCHEDULES: tuple[str, ...] = ()
    AUDIT_LOG: str | None = None
    ON_DEAD: str | None = None
    REDACT_PATTERNS: tuple[str, ...] = ()
    COMMANDS: tuple[str, ...] = ()
    APPROVED_PORTS: tuple[str, ...] = ()
    CLI_ACTOR: str | None = None
    CLI_ACTOR_RULES: tuple[str, ...] = ()
    METRICS_TOKEN: str | None = None
    METRICS_WINDOW_SECONDS: float = 300
    RUNTIME_JOBS: tuple[str, ...] = ()
    DEFAULTS: dict[str, Any] = field(default_factory=dict)
    # Fleet-wide limits per queue: {name: {"MAX_RUNNING": n}}, validated (``_queues``).
    QUEUES: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def max_running(self) -> dict[str, int]:
        """Each limited queue's ``MAX_RUNNING``: how many of its occurrences may run at once."""
        return {name: limits["MAX_RUNNING"] for name, limits in self.QUEUES.items()}

    @property
    def paused_all(self) -> bool:
        return "*" in self.PAUSED_SCHEDULES

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=self.LEASE_SECONDS)

    @property
    def plan_ahead(self) -> timedelta:
        return timedelta(seconds=self.PLAN_AHEAD_SECONDS)

    @property
    def shutdown_grace(self) -> timedelta:
        return timedelta(seconds=self.SHUTDOWN_GRACE_SECONDS)


_POSITIVE = {
    "LEASE_SECONDS",
    "CLAIM_BATCH_SIZE",
    "PLAN_BATCH_SIZE",
    "POLL_SECONDS",
    "HEARTBEAT_SECONDS",
    "ERROR_MESSAGE_MAX_CHARS",
    "PURGE_BATCH_SIZE",
    "RETENTION_BUDGET_SECONDS",
    "METRICS_WINDOW_SECONDS",
}
# Durations a worker turns into timedeltas and adds to instants: bounded well inside them.
_AT_MOST = {
    "PLAN_AHEAD_SECONDS": 600,
    "RETENTION_SECONDS": 86_400,
    "RETENTION_BUDGET_SECONDS": 3_600,
    "ONE_OFF_KEEP_SECONDS": 100 * 366 * 86_400,
    "METRICS_WINDOW_SECONDS": 86_400,
}
_NOT_NEGATIVE = {
    "PLAN_AHEAD_SECONDS",
    "SHUTDOWN_GRACE_SECONDS",
    "TIMEOUT_GRACE_SECONDS",
    "CLAIM_AHEAD",
    "RETENTION_SECONDS",
    "ONE_OFF_KEEP_SECONDS",
}


# Seconds: LEASE_SECONDS less TIMEOUT_GRACE_SECONDS is four renewal intervals (worker/leases.py),
# so this keeps renewals at most four a second.
MIN_LEASE_OVER_GRACE = 1


def get_settings() -> JobsSettings:
    """Read ``settings.DJANGO_JOBS`` now and return it validated, with defaults filled in."""
    raw: dict[str, Any] = dict(getattr(django_settings, "DJANGO_JOBS", {}) or {})
    known = {f.name: f.type for f in fields(JobsSettings)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        from .suggest import did_you_mean

        named = ", ".join(f"{key}{did_you_mean(key, known)}" for key in unknown)
        raise ConfigurationError(
            f"DJANGO_JOBS has unknown key(s) {named}; known keys: {', '.join(known)}"
        )
    paused = _paused_schedules(raw.pop("PAUSED_SCHEDULES", ()))
    audit_log = raw.pop("AUDIT_LOG", None)
    if audit_log is not None and (not isinstance(audit_log, str) or "." not in audit_log):
        raise ConfigurationError(
            f"DJANGO_JOBS['AUDIT_LOG'] must be the dotted path of a function, got {audit_log!r}"
        )
    on_dead = raw.pop("ON_DEAD", None)
    if on_dead is not None and (not isinstance(on_dead, str) or not _DOTTED.match(on_dead)):
        raise ConfigurationError(
            f"DJANGO_JOBS['ON_DEAD'] must be the dotted path of a callable taking the dead "
            f"occurrence's event (such as 'myapp.alerts.on_dead'), got {on_dead!r}"
        )
    redact = _redact_patterns(raw.pop("REDACT_PATTERNS", ()))
    commands = _dotted_paths("COMMANDS", raw.pop("COMMANDS", ()))
    ports = _dotted_paths("APPROVED_PORTS", raw.pop("APPROVED_PORTS", ()))
    cli_actor = _cli_actor_rules(raw.pop("CLI_ACTOR_RULES", ()))
    cli_default_actor = _cli_actor(raw.pop("CLI_ACTOR", None))
    metrics_token = _metrics_token(raw.pop("METRICS_TOKEN", None))
    runtime_jobs = _job_names("RUNTIME_JOBS", raw.pop("RUNTIME_JOBS", ()))
    defaults = _defaults(raw.pop("DEFAULTS", {}))
    queues = _queues(raw.pop("QUEUES", {}))
    for key, value in raw.items():
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ConfigurationError(f"DJANGO_JOBS['{key}'] must be a number, got {value!r}")
        if key in _POSITIVE and value <= 0:
            raise ConfigurationError(f"DJANGO_JOBS['{key}'] must be greater than 0, got {value!r}")
        if key in _AT_MOST and value > _AT_MOST[key]:
            raise ConfigurationError(
                f"DJANGO_JOBS['{key}'] must be at most {_AT_MOST[key]} seconds, got {value!r}"
            )
        if key in _NOT_NEGATIVE and value < 0:
            raise ConfigurationError(f"DJANGO_JOBS['{key}'] must not be negative, got {value!r}")
    lease = raw.get("LEASE_SECONDS", JobsSettings.LEASE_SECONDS)
    grace = raw.get("TIMEOUT_GRACE_SECONDS", JobsSettings.TIMEOUT_GRACE_SECONDS)
    if lease - grace < MIN_LEASE_OVER_GRACE:
        # A run whose lease cannot be confirmed is cancelled a renewal interval plus this
        # grace before its lease expires (worker/leases.py): the grace must fit in the lease.
        raise ConfigurationError(
            f"DJANGO_JOBS['TIMEOUT_GRACE_SECONDS'] must be at least {MIN_LEASE_OVER_GRACE} s "
            f"less than LEASE_SECONDS ({lease}), got {grace!r}: a run that ignores "
            "cancellation must be cut off before its lease can pass to another replica"
        )
    return JobsSettings(
        **raw,
        PAUSED_SCHEDULES=paused,
        AUDIT_LOG=audit_log,
        ON_DEAD=on_dead,
        REDACT_PATTERNS=redact,
        COMMANDS=commands,
        APPROVED_PORTS=ports,
        CLI_ACTOR=cli_default_actor,
        CLI_ACTOR_RULES=cli_actor,
        METRICS_TOKEN=metrics_token,
        RUNTIME_JOBS=runtime_jobs,
        DEFAULTS=defaults,
        QUEUES=queues,
    )


def record_defaults() -> dict[str, Any]:
    """``DJANGO_JOBS["DEFAULTS"]``, for a declaration made now (``schedule()``, ``@job``);
    empty while ``DJANGO_JOBS`` is invalid, which check E003 reports: a bad setting must not
    fail the import of every ``jobs.py`` and ``schedules.py`` (and with it every process)."""
    try:
        return get_settings().DEFAULTS
    except ConfigurationError:
        return {}


def _defaults(value: Any) -> dict[str, Any]:
    """The record defaults, each field checked by the rule its record column has
    (``spec.defaults_problems``)."""
    from .spec import defaults_problems

    for name, message in defaults_problems(value)[:1]:
        where = f"['{name}']" if name else ""
        raise ConfigurationError(f"DJANGO_JOBS['DEFAULTS']{where}: {message}")
    return dict(value)


# The most a queue's MAX_RUNNING may be (a claim counts that many rows under its lock).
MAX_RUNNING_LIMIT = 100_000


def _queues(value: Any) -> dict[str, dict[str, int]]:
    """``DJANGO_JOBS["QUEUES"]``: each key a queue's name, each value {"MAX_RUNNING": n}."""
    from .spec import queue_problem

    if not isinstance(value, dict):
        raise ConfigurationError(
            "DJANGO_JOBS['QUEUES'] must be a dict of queue names to their limits, such as "
            f"{{'reports': {{'MAX_RUNNING': 2}}}}, got {value!r}"
        )
    queues = {}
    for name, limits in value.items():
        if (problem := queue_problem(name)) is not None:
            raise ConfigurationError(f"DJANGO_JOBS['QUEUES']: queue name {problem}")
        where = f"DJANGO_JOBS['QUEUES'][{name!r}]"
        if not isinstance(limits, dict) or set(limits) != {"MAX_RUNNING"}:
            raise ConfigurationError(
                f"{where} must be {{'MAX_RUNNING': n}} (the only limit), got {limits!r}"
            )
        most = limits["MAX_RUNNING"]
        if type(most) is not int or not 1 <= most <= MAX_RUNNING_LIMIT:
            raise ConfigurationError(
                f"{where}['MAX_RUNNING'] must be a whole number from 1 to "
                f"{MAX_RUNNING_LIMIT}, got {most!r}"
            )
        queues[name] = {"MAX_RUNNING": most}
    return queues


def _paused_schedules(value: Any) -> tuple[str, ...]:
    """The kill switch's entries, each checked against the grammar in the module docstring."""
    if isinstance(value, str) or not all(isinstance(k, str) and k for k in value):
        raise ConfigurationError(
            "DJANGO_JOBS['PAUSED_SCHEDULES'] must be a list of schedule keys, '<tenant>/<key>', "
            f"'<tenant>/*' or '*', got {value!r}"
        )
    for entry in value:
        tenant, slash, key = entry.partition("/")
        if slash and not tenant:
            raise ConfigurationError(
                f"DJANGO_JOBS['PAUSED_SCHEDULES']: {entry!r} names no tenant before '/'; the "
                "default tenant has no '<tenant>/' form: name its schedules by their bare "
                "keys, which pause them in every tenant"
            )
        if slash and not key:
            raise ConfigurationError(
                f"DJANGO_JOBS['PAUSED_SCHEDULES']: {entry!r} names no key after '/'; write "
                f"'{tenant}/<key>' for one schedule of tenant {tenant!r} or '{tenant}/*' for "
                "all of them"
            )
        if "*" in entry and entry != "*" and not (slash and key == "*" and "*" not in tenant):
            raise ConfigurationError(
                f"DJANGO_JOBS['PAUSED_SCHEDULES']: {entry!r} is not a pattern: '*' stands "
                "alone (every schedule) or as '<tenant>/*' (every schedule of a tenant); write "
                "a bare key to pause it in every tenant"
            )
    return tuple(value)


_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _dotted_paths(key: str, value: Any) -> tuple[str, ...]:
    """Module or callable paths (``"billing.commands"``, ``"billing.commands.pay"``)."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigurationError(
            f"DJANGO_JOBS['{key}'] must be a list of dotted paths of modules or callables, "
            f"got {value!r}"
        )
    for path in value:
        if not isinstance(path, str) or not _DOTTED.match(path):
            raise ConfigurationError(
                f"DJANGO_JOBS['{key}']: {path!r} is not a dotted path such as "
                "'billing.commands' or 'billing.commands.send_statements'"
            )
    return tuple(value)


def _job_names(key: str, value: Any) -> tuple[str, ...]:
    """Names of registered jobs (``@job("billing.send_statements")``)."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigurationError(f"DJANGO_JOBS['{key}'] must be a list of job names, got {value!r}")
    for name in value:
        if not isinstance(name, str) or not name or name != name.strip():
            raise ConfigurationError(
                f"DJANGO_JOBS['{key}']: {name!r} is not a job name such as "
                "'billing.send_statements'"
            )
    return tuple(value)


CLI_ACTOR_RULES = ("os_user", "no_superuser")


def _cli_actor_rules(value: Any) -> tuple[str, ...]:
    """``--actor`` is self-asserted; each rule narrows whom it may name."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigurationError(
            f"DJANGO_JOBS['CLI_ACTOR_RULES'] must be a list of rules "
            f"({', '.join(map(repr, CLI_ACTOR_RULES))}), got {value!r}"
        )
    for rule in value:
        if rule not in CLI_ACTOR_RULES:
            raise ConfigurationError(
                f"DJANGO_JOBS['CLI_ACTOR_RULES']: unknown rule {rule!r}; the rules are "
                f"{', '.join(map(repr, CLI_ACTOR_RULES))}"
            )
    return tuple(value)


def _cli_actor(value: Any) -> str | None:
    """The username ``manage.py jobs`` acts as without ``--actor``."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or value != value.strip():
        raise ConfigurationError(
            f"DJANGO_JOBS['CLI_ACTOR'] must be a Django username such as 'ops', or None, "
            f"got {value!r}"
        )
    return value


# A metrics token is compared in constant time; too short a one could still be guessed.
METRICS_TOKEN_MIN_CHARS = 32


def _metrics_token(value: Any) -> str | None:
    """The bearer token of the metrics view: printable ASCII without spaces (a header value)."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or len(value) < METRICS_TOKEN_MIN_CHARS
        or not all("!" <= ch <= "~" for ch in value)
    ):
        raise ConfigurationError(
            f"DJANGO_JOBS['METRICS_TOKEN'] must be a string of at least "
            f"{METRICS_TOKEN_MIN_CHARS} printable ASCII characters without spaces (such as "
            "secrets.token_urlsafe(32)), or None"
        )
    return value


def _redact_patterns(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigurationError(
            f"DJANGO_JOBS['REDACT_PATTERNS'] must be a list of regular expressions, got {value!r}"
        )
    for pattern in value:
        if not isinstance(pattern, str) or not pattern:
            raise ConfigurationError(
                "DJANGO_JOBS['REDACT_PATTERNS'] must hold non-empty strings (regular "
                f"expressions), got {pattern!r}"
            )
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise ConfigurationError(
                f"DJANGO_JOBS['REDACT_PATTERNS']: {pattern!r} is not a valid regular "
                f"expression: {exc}"
            ) from None
        if compiled.match(""):
            raise ConfigurationError(
                f"DJANGO_JOBS['REDACT_PATTERNS']: {pattern!r} matches the empty string, so it "
                "would redact between every character; make it match the secret itself"
            )
    return tuple(value)


def database_vendor() -> str:
    """The vendor of the default database (system checks refuse anything but PostgreSQL)."""
    from django.db import connection

    return connection.vendor


def database_engine() -> str:
    """The configured ENGINE of ``DATABASES['default']``, read without connecting (check
    E001 refuses anything but PostgreSQL before a command touches the database)."""
    default = (getattr(django_settings, "DATABASES", None) or {}).get("default") or {}
    return str(default.get("ENGINE") or "django.db.backends.dummy")


def use_tz() -> bool:
    return bool(django_settings.USE_TZ)


# The Tasks-framework backend of django_jobs (``TASKS[alias]["BACKEND"]``).
TASKS_BACKEND = "django_jobs.tasks.JobsBackend"


def tasks_backends() -> dict[str, dict[str, Any]]:
    """The aliases of ``settings.TASKS`` whose backend is ``JobsBackend``, each with its
    ``OPTIONS`` (what ``tasks.TaskOptions`` reads): the replicas register a job for each."""
    configured = getattr(django_settings, "TASKS", None) or {}
    if not isinstance(configured, dict):
        return {}
    return {
        str(alias): dict(params.get("OPTIONS") or {})
        for alias, params in configured.items()
        if isinstance(params, dict) and _jobs_backend(params.get("BACKEND"))
    }


def tasks_queues() -> dict[str, list[object]]:
    """The ``QUEUES`` of each ``JobsBackend`` alias of ``settings.TASKS`` that names any (an
    alias without the key accepts every queue name): check E035 reads them."""
    configured = getattr(django_settings, "TASKS", None) or {}
    aliases = tasks_backends()
    return {
        alias: list(params["QUEUES"])
        for alias, params in configured.items()
        if alias in aliases and isinstance(params.get("QUEUES"), list | tuple | set)
    }


def _jobs_backend(path: object) -> bool:
    """``path`` names ``JobsBackend`` or a subclass of it (a path that does not import is
    neither: Django's own loading of ``TASKS`` reports it)."""
    from django.utils.module_loading import import_string

    try:
        backend = path if path == TASKS_BACKEND else import_string(str(path))
    except ImportError:
        return False
    if isinstance(backend, str):
        return True
    names = (f"{c.__module__}.{c.__qualname__}" for c in getattr(backend, "__mro__", ()))
    return TASKS_BACKEND in names
