"""Migrations run while replicas write (docs/worker.md, "Deploying replicas"): an index on a
table that grows with the work (occurrences, attempts, steps, audit records) is built or
dropped ``CONCURRENTLY``, never by a plain ``CREATE INDEX``, which blocks every write to the
table while it reads it (about 10 s per index at 10 million occurrences: claims and
completions stall and leases lapse). Migrations 0011 and 0015 were the first built so; this
holds every migration after 0015 to it, read from the migration graph itself.
"""

from __future__ import annotations

import io

import pytest
from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.core.management import call_command
from django.db import connection
from django.db.migrations import Migration
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations import AddIndex, RemoveIndex

# Tables that grow with the work done, by model name.
LARGE = {"occurrence", "attempt", "step", "auditrecord"}
CONCURRENT = (AddIndexConcurrently, RemoveIndexConcurrently)
# The first migrations held to it (0011 and 0015 already are; earlier ones built indexes on
# tables that were empty or small when they were released).
AFTER = 15


def ours() -> list[Migration]:
    loader = MigrationLoader(None, ignore_no_migrations=True)
    return [
        migration
        for (app, name), migration in sorted(loader.disk_migrations.items())
        if app == "django_jobs" and int(name[:4]) > AFTER
    ]


def test_the_graph_holds_the_queue_migrations() -> None:
    """The check below reads the migrations it means to (the queues' among them)."""
    names = [m.name for m in ours()]
    assert {"0020_queues", "0021_queue_indexes"} <= set(names), names


def test_no_migration_after_0015_blocks_writes_to_a_large_table_with_an_index() -> None:
    blocking = [
        f"{m.name}: {type(op).__name__} on {op.model_name}"
        for m in ours()
        for op in m.operations
        if isinstance(op, AddIndex | RemoveIndex)
        and not isinstance(op, CONCURRENT)
        and op.model_name_lower in LARGE
    ]
    assert blocking == [], "build them with AddIndexConcurrently, atomic = False"


def test_a_migration_with_concurrent_index_builds_is_not_atomic_and_does_nothing_else() -> None:
    """``CREATE INDEX CONCURRENTLY`` cannot run in a transaction; and a non-atomic migration
    that also changed the schema would be left half-applied by a build that fails, its other
    changes done and the migration not recorded, so ``migrate`` could not simply run again."""
    for migration in ours():
        concurrent = [op for op in migration.operations if isinstance(op, CONCURRENT)]
        if concurrent:
            assert migration.atomic is False, migration.name
            assert concurrent == migration.operations, migration.name


@pytest.mark.django_db
def test_the_queue_indexes_are_built_and_valid() -> None:
    """Built CONCURRENTLY by the test database's ``migrate``: each exists and is valid (a
    failed concurrent build leaves an INVALID index the planner never uses)."""
    names = ["django_jobs_occurrence_queue", "django_jobs_occurrence_running"]
    names.append("django_jobs_occurrence_qdue")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE c.relname = ANY(%s)",
            [names],
        )
        found = dict(cursor.fetchall())
    assert found == dict.fromkeys(names, True)


@pytest.mark.django_db(transaction=True)
def test_migrate_goes_back_to_0019_and_forward_again() -> None:
    """Back over the queues' migrations and forward again, as an upgrade from the release
    before them runs it: ``migrate`` runs the database checks (W031, E010-E016 over the
    stored records) first, with this release's models on a database without their columns;
    they wait for the migrations instead of failing it (column "queue" does not exist)."""
    out = io.StringIO()
    try:
        call_command("migrate", "django_jobs", "0019", verbosity=0, stdout=out)
        with connection.cursor() as cursor:
            columns = connection.introspection.get_table_description(cursor, "django_jobs_schedule")
        assert "queue" not in {c.name for c in columns}
    finally:
        call_command("migrate", verbosity=0, stdout=out, skip_checks=False)
    test_the_queue_indexes_are_built_and_valid()
