"""PostgreSQL's own ceiling on this machine: pgbench single-row-update transactions per second
(synchronous_commit as the server has it), with one client and with eight."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from ..postgres import Database

SCRIPT = """\\set aid random(1, 100000 * :scale)
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;
"""


def pgbench() -> str:
    found = shutil.which("pgbench") or next(
        iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/pgbench"), reverse=True)), None
    )
    if not found:
        raise RuntimeError("pgbench not found: apt-get install postgresql-client (or -contrib)")
    return found


def _env(db: Database) -> dict[str, str]:
    params = conninfo_to_dict(db.url)
    env = {**os.environ}
    for key, var in [
        ("host", "PGHOST"),
        ("port", "PGPORT"),
        ("user", "PGUSER"),
        ("dbname", "PGDATABASE"),
        ("password", "PGPASSWORD"),
    ]:
        if params.get(key):
            env[var] = str(params[key])
    return env


def run(db: Database, *, seconds: int = 10, clients: tuple[int, ...] = (1, 8)) -> dict[str, Any]:
    env = _env(db)
    binary = pgbench()
    subprocess.run([binary, "-i", "-q", "-s", "1"], env=env, check=True, capture_output=True)
    results: dict[str, Any] = {"scenario": "pgbench single-row update"}
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write(SCRIPT)
        script.flush()
        for n in clients:
            out = subprocess.run(
                [
                    binary,
                    "-n",
                    "-f",
                    script.name,
                    "-c",
                    str(n),
                    "-j",
                    str(min(n, 2)),
                    "-T",
                    str(seconds),
                ],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
            if not match:
                raise RuntimeError(f"pgbench printed no tps:\n{out}")
            results[f"tps_{n}_clients"] = float(match.group(1))
    db.execute(
        "DROP TABLE IF EXISTS pgbench_accounts, pgbench_branches, pgbench_history, pgbench_tellers"
    )
    return results
