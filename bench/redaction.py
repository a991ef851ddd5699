"""Redaction's speed on a 10 KB error text, against an older implementation in the same run.

    .venv/bin/python -m bench.redaction [--against 8f518d8] [--repeat 200]

The older ``django_jobs/safe_error.py`` is read from git at ``--against`` and loaded beside
the current one; both redact the same texts (a realistic 10 KB error without secrets, and the
same with the secret corpus of tests/secret_corpus.py spread through it), and the ratio
new/old of the best time of each is printed (below 1: the current code is faster).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from django_jobs import safe_error
from tests.secret_corpus import CORPUS

ROOT = Path(__file__).resolve().parent.parent

# What a failing job's message holds: a driver's error, its SQL, an HTTP body, URLs, paths.
LINES = [
    'psycopg.errors.UniqueViolation: duplicate key value violates unique constraint "inv_pkey"',
    "DETAIL:  Key (tenant_id, number)=(acme, 2024-00017) already exists.",
    "CONTEXT:  SQL statement INSERT INTO billing_invoice (tenant_id, number, total) VALUES",
    "GET https://api.partner.example/v2/accounts/77120/statements?page=3&per_page=100 -> 502",
    '{"error": {"code": "upstream_timeout", "message": "the ledger did not answer in 30 s"}}',
    "retrying in 30 s (attempt 2 of 5); last status 502 Bad Gateway from 10.0.4.17:8443",
    "File /srv/app/billing/statements.py, line 214, in send_statement: total mismatch",
    "worker=replica-3 schedule=acme.nightly occurrence=5f0c9a tenant=acme took 12.4 s",
]


def error_text(size: int = 10_000, *, secrets: bool) -> str:
    """About ``size`` characters of error lines, with one corpus shape every few lines."""
    out: list[str] = []
    shapes = iter(CORPUS)
    i = 0
    while sum(map(len, out)) < size:
        out.append(LINES[i % len(LINES)])
        if secrets and i % 4 == 3 and (shape := next(shapes, None)):
            out.append(shape.text)
        i += 1
    return "\n".join(out)[:size]


def older(rev: str) -> ModuleType:
    """``django_jobs/safe_error.py`` as it was at ``rev``, loaded as its own module."""
    source = subprocess.run(
        ["git", "show", f"{rev}:django_jobs/safe_error.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "safe_error_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("safe_error_before", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def best(redact: Callable[[str], str], text: str, repeat: int) -> float:
    redact(text)  # compile and import once, as a worker does on its first error
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        redact(text)
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="8f518d8", help="git revision of the older code")
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    before = older(args.against)
    print(f"redaction of a 10 KB error, best of {args.repeat}: current vs {args.against}")
    for label, text in [
        ("no secrets", error_text(secrets=False)),
        ("with secrets", error_text(secrets=True)),
    ]:
        new = best(safe_error.redact, text, args.repeat)
        old = best(before.redact, text, args.repeat)
        print(
            f"  {label:<13} {len(text):>6} chars  current {new * 1e3:7.3f} ms  "
            f"before {old * 1e3:7.3f} ms  ratio current/before {new / old:5.2f}"
        )


if __name__ == "__main__":
    main()
