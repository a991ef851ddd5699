"""The PostgreSQL a campaign or benchmark runs on: an embedded cluster it owns (and can stop),
or a fresh database on the server ``DATABASE_URL`` names (never restarted: not ours to stop)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import psycopg

from django_jobs.contrib import embedded

ROOT = Path(__file__).resolve().parents[1]


class Database:
    def __init__(self, url: str, *, pgdata: Path | None) -> None:
        self.url = url
        self.pgdata = pgdata

    @classmethod
    def create(cls, server_url: str | None, *, name: str) -> Database:
        """A fresh database ``name``: on the server at ``server_url``, else in an embedded
        cluster of its own under ``.embedded-pg/<name>`` (deleted when this process exits)."""
        if server_url:
            admin = psycopg.connect(server_url, autocommit=True, connect_timeout=10)
            with admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                    [name],
                )
                admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
                admin.execute(f'CREATE DATABASE "{name}"')
            parts = urlparse(server_url)
            return cls(urlunparse(parts._replace(path=f"/{name}")), pgdata=None)
        pgdata = ROOT / ".embedded-pg" / name
        if pgdata.exists():
            embedded.stop(pgdata)
            shutil.rmtree(pgdata)
        return cls(embedded.start(pgdata, throwaway=True), pgdata=pgdata)

    @property
    def restartable(self) -> bool:
        return self.pgdata is not None

    def migrate(self, env: dict[str, str]) -> None:
        subprocess.run(
            [sys.executable, "-W", "ignore", str(ROOT / "manage.py"), "migrate", "-v0"],
            cwd=ROOT,
            env={**env, "DATABASE_URL": self.url},
            check=True,
            timeout=300,
        )

    def stop(self) -> None:
        assert self.pgdata is not None
        embedded.pause(self.pgdata)

    def start(self) -> None:
        assert self.pgdata is not None
        embedded.resume(self.pgdata, self.url)

    def rows(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url, connect_timeout=10) as conn:
            return conn.execute(sql, params).fetchall()

    def execute(self, sql: str, params: Any = None) -> None:
        """One statement in autocommit (VACUUM included)."""
        with psycopg.connect(self.url, connect_timeout=10, autocommit=True) as conn:
            conn.execute(sql, params)

    def terminate_backends(self, application_name: str) -> int:
        """Kill the server processes of one replica's connections, as a network cut would."""
        killed = self.rows(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s",
            [application_name],
        )
        return sum(1 for (ok,) in killed if ok)
