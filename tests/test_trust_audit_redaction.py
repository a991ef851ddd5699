"""#33 finding 12: audit records keep arguments redacted as the pages show them.

On 8f518d8, the arguments given to run-now and ``upsert_schedule`` were copied raw into audit
records (which retention never purges) and handed raw to the project's ``AUDIT_LOG``: the
pages showed ``[redacted]`` while the table and the project's log held the token. Redaction
now happens in the one audit writer (``audit.entry``), so every record carrying arguments,
written by any service, is redacted the same way: by key name and by value shape.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from django_jobs import audit, services
from django_jobs.models import AuditRecord
from django_jobs.registry import registry
from django_jobs.safe_error import REDACTED, shown_json

from .factories import T0, ScheduleFactory, declaration
from .secret_corpus import CORPUS

pytestmark = pytest.mark.django_db

TOKEN = "tok-" + "Q7w9e1r3t5y7u9i0"
SLACK_HOOK = "https://hooks.slack.com/services/T0A1B2C3D/B0E4F5G6H/" + "x9Y8z7W6v5U4t3S2r1Q0p9O8"
AWS_ID = "AKIA" + "Z3XQ7V2B9N4M8K1J"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "Q1w2E3r4T5"
ARGS = {
    "customer": "acme",
    "api_token": TOKEN,  # hidden by its name
    "notify": SLACK_HOOK,  # hidden by its shape
    "aws": {"id": AWS_ID, "key": AWS_SECRET},  # the secret shows only beside its id
    "accounts": [3, 5],
}
SECRETS = (TOKEN, "x9Y8z7W6v5U4t3S2r1Q0p9O8", AWS_ID, AWS_SECRET)

PROJECT_LOG: list[dict[str, Any]] = []


def project_audit_log(**record: Any) -> None:
    """A project's ``AUDIT_LOG`` function: it keeps what it is given."""
    PROJECT_LOG.append(record)


JOB = "tests.audit_redaction"


@pytest.fixture(autouse=True)
def offered(registered: Callable[..., None]) -> None:
    """A job offered at run time (so run-now may give it arguments, upsert may schedule it)."""
    # 8f518d8 had no ``runtime=``: every job was offered there.
    runtime = "runtime" in inspect.signature(registry.register).parameters
    registered(JOB, lambda run: None, **({"runtime": True} if runtime else {}))


@pytest.fixture
def ops() -> User:
    return User.objects.create_superuser("ops", "ops@example.com", "x")


def assert_kept_redacted(change: dict[str, Any]) -> None:
    """``change`` holds the arguments without a secret, and what is not secret as it was."""
    text = repr(change)
    assert [s for s in SECRETS if s in text] == []
    args = change["args"]
    assert args["customer"] == "acme"
    assert args["accounts"] == [3, 5]
    assert args["api_token"] == REDACTED


def test_run_nows_arguments_are_redacted_in_its_audit_record(ops) -> None:
    schedule = ScheduleFactory.create(key="billing.statements", job=JOB, args={"customer": "acme"})
    services.run_now(schedule, actor=ops, reason="resend", now=T0, args=ARGS)
    record = AuditRecord.objects.get(action="run_now")
    assert_kept_redacted(record.after)


def test_upsert_schedules_arguments_are_redacted_when_created_and_changed(ops) -> None:
    services.upsert_schedule(
        declaration("acme.statements", job=JOB, tenant="acme", args={"customer": "acme"}),
        actor=ops,
        reason="new",
        now=T0,
    )
    services.upsert_schedule(
        declaration("acme.statements", job=JOB, tenant="acme", args=ARGS),
        actor=ops,
        reason="the partner's token",
        now=T0 + timedelta(hours=1),
    )
    changed = AuditRecord.objects.get(action="schedule.arguments_changed")
    assert_kept_redacted(changed.after)
    for record in AuditRecord.objects.all():
        text = repr((record.before, record.after))
        assert [s for s in SECRETS if s in text] == [], record.action


@override_settings(DJANGO_JOBS={"AUDIT_LOG": "tests.test_trust_audit_redaction.project_audit_log"})
def test_the_projects_audit_log_is_handed_redacted_arguments(ops) -> None:
    PROJECT_LOG.clear()
    schedule = ScheduleFactory.create(key="billing.statements", job=JOB, args={"customer": "acme"})
    services.run_now(schedule, actor=ops, reason="resend", now=T0, args=ARGS)
    (handed,) = [r for r in PROJECT_LOG if r["action"] == "run_now"]
    assert_kept_redacted(handed["after"])
    assert not AuditRecord.objects.exists()


@override_settings(DJANGO_JOBS={"REDACT_PATTERNS": [r"acct-(?P<secret>\d{6})"]})
def test_the_projects_patterns_apply_to_audit_records_too(ops) -> None:
    schedule = ScheduleFactory.create(key="billing.statements", job=JOB, args={"customer": "acme"})
    services.run_now(schedule, actor=ops, reason="x", now=T0, args={"note": "acct-884211"})
    assert AuditRecord.objects.get(action="run_now").after["args"] == {"note": "acct-[redacted]"}


def test_a_record_without_secrets_is_kept_as_given() -> None:
    fields = audit.entry(
        at=T0,
        actor="django_jobs.sync",
        action="schedule.changed",
        tenant="acme",
        schedule_id=1,
        reason="sync",
        before={"args": {"customer": "acme", "max_tokens": 3}, "enabled": True, "at": T0},
        after={"args": {"customer": "globex", "dry_run": None}, "timing": "0 9 * * *"},
    )
    assert fields["before"] == {
        "args": {"customer": "acme", "max_tokens": 3},
        "enabled": True,
        "at": T0.isoformat(),
    }
    assert fields["after"] == {
        "args": {"customer": "globex", "dry_run": None},
        "timing": "0 9 * * *",
    }


@pytest.mark.parametrize("shape", CORPUS, ids=[s.name for s in CORPUS])
def test_a_secret_shape_in_arguments_is_stored_redacted(shape) -> None:
    from django_jobs.safe_error import redacted_json

    stored = redacted_json({"args": {"note": shape.text}})
    assert shape.secret not in repr(stored)
    assert shape.secret not in shown_json(stored)
