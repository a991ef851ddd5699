from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import environ
import hypothesis
import pytest
import structlog

from django_jobs.testing import FakeClock

from .processes import Cluster, Replica, servers_running

_SETS_BEFORE = pytest.StashKey[tuple[dict[Any, Any], dict[Any, Any]]]()
_STRUCTLOG_BEFORE = pytest.StashKey[dict[str, Any] | None]()

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.test import Client

    from django_jobs.models import Occurrence
    from django_jobs.registry import Registry
    from django_jobs.worker.loop import Worker

ROOT = Path(__file__).resolve().parent.parent

# Hypothesis's per-example deadline (200 ms) and its too-slow health check measure wall-clock
# time: on two contended cores they fail a test for the machine's load, not for what it checks.
# Loaded before the test modules build their own ``settings(...)``, which inherit it.
hypothesis.settings.register_profile(
    "suite", deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow]
)
hypothesis.settings.load_profile("suite")


# The whole suite runs on xdist workers (``addopts``: ``-n auto --dist worksteal``): most of
# its time is spent waiting on real processes and PostgreSQL, so on two cores six workers
# finish in about half the time one does (README "Run the tests"). A run naming test files or
# node ids runs in this process: six workers, each creating its own test database, would
# take longer than the few tests. ``-n N`` (``-n0``) or ``JOBS_TEST_WORKERS`` choose.
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    named = [arg.split("::")[0] for arg in config.args]
    whole = config.args_source == pytest.Config.ArgsSource.TESTPATHS or all(
        Path(arg).is_dir() for arg in named
    )
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker never starts workers of its own
        return 0
    if "JOBS_TEST_WORKERS" in os.environ:
        return int(os.environ["JOBS_TEST_WORKERS"])
    return min(3 * (os.cpu_count() or 1), 12) if whole else 0


def pytest_configure(config: pytest.Config) -> None:
    """Give the Python processes the tests start (xdist workers, every ``runworker`` and
    ``manage.py``) a bytecode cache, when this environment turns writing one off
    (``PYTHONDONTWRITEBYTECODE``): each would otherwise compile about 150 modules from source
    at start (tests/README.md has what it saves). The cache lives in pytest's own cache folder
    (``PYTHONPYCACHEPREFIX``), never beside the sources; a prefix the caller set is kept."""
    if not sys.dont_write_bytecode or "PYTHONPYCACHEPREFIX" in os.environ:
        return
    cache = getattr(config, "cache", None)  # none with -p no:cacheprovider
    if cache is None or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(cache.mkdir("pycache"))


# Fixtures that start real OS processes: a test using one is a ``processes`` test.
PROCESS_FIXTURES = {"start", "cluster"}


def _uses_process_fixture(item: pytest.Item) -> bool:
    names = PROCESS_FIXTURES & set(getattr(item, "fixturenames", ()))
    # A parametrize argument of the same name (``start`` in the DST tables) is no fixture.
    callspec = getattr(item, "callspec", None)
    return bool(names - set(callspec.params if callspec else ()))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that start processes, and make every processes or browser test ``slow``,
    so ``-m "not slow"`` is the fast subset without each module repeating the rule."""
    for item in items:
        if _uses_process_fixture(item):
            item.add_marker(pytest.mark.processes)
        if item.get_closest_marker("processes") or item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.slow)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if a PostgreSQL server a test started for itself (``Cluster``) still runs.

    Only this process's own servers count: another run in the same checkout may be in the
    middle of its outage tests.
    """
    left = servers_running(Cluster.made)
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"PostgreSQL servers left running by the tests: {left}", red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """Without DATABASE_URL, run the suite on a throwaway embedded PostgreSQL."""
    if os.environ.get("DATABASE_URL"):
        return
    from django.conf import settings

    from django_jobs.contrib import embedded

    url = embedded.start(ROOT / ".embedded-pg" / "tests", throwaway=True)
    config = environ.Env.db_url_config(url)
    default = settings.DATABASES["default"]
    for key in ("NAME", "USER", "PASSWORD", "HOST", "PORT"):
        default[key] = config.get(key, "")


def _process_wide_sets() -> tuple[dict[Any, Any], dict[Any, Any]]:
    from django_jobs.declarations import declared
    from django_jobs.registry import registry

    return dict(declared._items), dict(registry._handlers)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_SETS_BEFORE] = _process_wide_sets()
    item.stash[_STRUCTLOG_BEFORE] = structlog.get_config() if structlog.is_configured() else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """A test leaves the process's declared schedules and job registry as it found them (once
    its fixtures, monkeypatch among them, are torn down): a later test in the same xdist worker
    syncs or runs that set, and ``runworker --once`` counts what it created. A test that leaks
    fails here, by name, and the sets are put back. Structlog's configuration is put back
    without failing the test."""
    yield
    from django_jobs.declarations import declared
    from django_jobs.registry import registry

    # ``ScheduledJobs`` and the commands configure structlog for a project that has not, as
    # documented; the next test starts from the suite's own (unconfigured) structlog again.
    config = item.stash[_STRUCTLOG_BEFORE]
    if config is None:
        structlog.reset_defaults()
    else:
        structlog.configure(**config)
    declarations, handlers = item.stash[_SETS_BEFORE]
    after_declarations, after_handlers = _process_wide_sets()
    leaked = {
        "declared schedules": sorted(
            "/".join(filter(None, k)) for k in after_declarations.keys() ^ declarations.keys()
        ),
        "registered jobs": sorted(after_handlers.keys() ^ handlers.keys()),
    }
    declared._items, registry._handlers = declarations, handlers
    changed = {what: names for what, names in leaked.items() if names}
    assert not changed, f"the test left the process-wide sets changed: {changed}"


@pytest.fixture(autouse=True)
def pass_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process workers plan every due schedule in one pass, however slow the machine: the
    worker's 0.5 s pass budget (``PASS_BUDGET_SECONDS``) is measured in wall-clock time, so
    on two contended cores a pass could stop after one schedule and an assertion on what one
    pass did would depend on the machine's speed. The tests of the budget pass
    ``budget_seconds`` to ``plan_due`` themselves; ``runworker`` processes keep the real one."""
    monkeypatch.setattr("django_jobs.worker.cadence.PASS_BUDGET_SECONDS", math.inf)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))


@pytest.fixture
def ran() -> list[str]:
    """The occurrence keys the ``jobs`` fixture's handler ran, in order."""
    return []


@pytest.fixture
def jobs(ran: list[str]) -> Registry:
    """A registry whose one job, ``tests.noop``, records each run's occurrence key in ``ran``
    (modules that need other jobs define their own)."""
    from django_jobs.registry import Registry

    jobs = Registry()
    jobs.register("tests.noop", lambda run: ran.append(run.occurrence_key))
    return jobs


@pytest.fixture
def dead(clock: FakeClock) -> Occurrence:
    """A dead occurrence of ``acme/acme.nightly`` after one failed attempt, the clock a minute
    later (modules that need another shape define their own ``dead``)."""
    from .factories import T0, ScheduleFactory, dead_occurrence

    schedule = ScheduleFactory.create(tenant="acme", key="acme.nightly", job="tests.flaky")
    occurrence = dead_occurrence(schedule)
    clock.set(T0 + timedelta(minutes=1))
    return occurrence


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Replica]]:
    """Start real ``runworker`` processes (``Replica``); each is stopped after the test."""
    started: list[Replica] = []

    def start(name: str, **kwargs: Any) -> Replica:
        replica = Replica(name, tmp_path, **kwargs)
        started.append(replica)
        return replica

    yield start
    for replica in started:
        replica.stop()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A migrated PostgreSQL of the test's own, which it may stop and start; stopped for good
    and deleted after the test, however the test ended."""
    cluster = Cluster()
    try:
        cluster.migrate()
        yield cluster
    finally:
        cluster.close()
    left = servers_running([cluster.pgdata])
    assert not left, f"the test's PostgreSQL still runs after its clean-up: {left}"


@pytest.fixture
def registered() -> Iterator[Callable[..., None]]:
    """Register job handlers for one test (``registered(name, func, departure=...)``)."""
    from django_jobs.registry import registry

    names: list[str] = []

    def register(name: str, func: Any, **kwargs: Any) -> None:
        registry.register(name, func, **kwargs)
        names.append(name)

    yield register
    for name in names:
        registry.unregister(name)


@pytest.fixture
def inline_worker(clock: FakeClock) -> Iterator[Callable[..., Worker]]:
    """Make inline workers (``inline_worker(jobs)``): each runs occurrences in the test's
    thread and transaction, on the test's clock; closed after the test."""
    from django_jobs.conf import get_settings
    from django_jobs.worker.loop import Worker

    made: list[Worker] = []

    def make(jobs: Registry, *, replica_id: str | None = None) -> Worker:
        made.append(
            Worker(
                replica_id=replica_id or f"replica-{len(made) + 1}",
                clock=clock,
                jobs=jobs,
                settings=get_settings(),
                listen=False,
                inline=True,
            )
        )
        return made[-1]

    yield make
    for worker in made:
        worker.close()


@pytest.fixture
def worker(jobs: Registry, inline_worker: Callable[..., Worker]) -> Worker:
    """An inline worker running the ``jobs`` fixture's registry (``replica-1``)."""
    return inline_worker(jobs)


@pytest.fixture
def root() -> User:
    """A superuser, ``root``."""
    from django.contrib.auth.models import User

    return User.objects.create_superuser("root", "root@example.com", "pw")


@pytest.fixture
def root_client(root: User) -> Client:
    """A test client logged in as ``root``."""
    from django.test import Client

    client = Client()
    client.force_login(root)
    return client


@pytest.fixture
def alice() -> User:
    """Staff with no grant of her own (modules that need grants define their own ``alice``)."""
    from django.contrib.auth.models import User

    return User.objects.create_user("alice", is_staff=True)
