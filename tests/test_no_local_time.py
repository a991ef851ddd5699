"""Production code never reads machine-local or naive time, nor TIME_ZONE."""

from __future__ import annotations

from pathlib import Path

import django_jobs
from django_jobs.source_rules import local_time_reads

SOURCE = Path(django_jobs.__file__).parent


def test_the_scanner_finds_each_kind_of_local_time_read() -> None:
    sample = "\n".join(
        [
            "datetime.now()",
            "datetime.datetime.utcnow()",
            "date.today()",
            "time.localtime()",
            "timezone.localtime(x)",
            "datetime.fromtimestamp(1)",
            "settings.TIME_ZONE",
            "datetime.now(UTC)",  # allowed
            "datetime.fromtimestamp(1, tz=UTC)",  # allowed
        ]
    )
    assert len(local_time_reads(sample)) == 7


def test_production_code_reads_no_machine_local_time() -> None:
    offenders = {
        str(path.relative_to(SOURCE)): hits
        for path in sorted(SOURCE.rglob("*.py"))
        if (hits := local_time_reads(path.read_text()))
    }
    assert offenders == {}
