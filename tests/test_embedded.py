from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from django_jobs.contrib.embedded import prune_dead_owners


@pytest.mark.processes
def test_dead_owner_pids_are_pruned_so_the_last_live_owner_stops_the_server(tmp_path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(dead.stdout)
    live_pid = os.getpid()
    (tmp_path / ".handle_pids.json").write_text(json.dumps([dead_pid, live_pid]))
    assert prune_dead_owners(tmp_path) == [dead_pid]
    assert json.loads((tmp_path / ".handle_pids.json").read_text()) == [live_pid]


def test_pruning_a_folder_without_owners_changes_nothing(tmp_path) -> None:
    assert prune_dead_owners(tmp_path) == []
    assert not (tmp_path / ".handle_pids.json").exists()
