"""docs/worker.md's "Settings" table is the one list of ``DJANGO_JOBS`` keys a user reads (the
conf module points to it): it names every key ``JobsSettings`` has, with its default, and no
other."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Any

from django_jobs.conf import JobsSettings

WORKER_MD = Path(__file__).resolve().parent.parent / "docs" / "worker.md"
ROW = re.compile(r"^\| `([A-Z_]+)` \| `?([^|`]+)`? \|")


def documented() -> dict[str, Any]:
    text = WORKER_MD.read_text()
    table = text[text.index("\n## Settings\n") :].split("\n## ", 2)[1]
    return {m[1]: ast.literal_eval(m[2].strip()) for m in map(ROW.match, table.splitlines()) if m}


def defaults() -> dict[str, Any]:
    made = JobsSettings()  # every field at its default
    return {f.name: getattr(made, f.name) for f in dataclasses.fields(JobsSettings)}


def test_the_settings_table_names_every_key_with_its_default() -> None:
    assert documented() == defaults()
