from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from django_jobs.conf import get_settings
from django_jobs.exceptions import ConfigurationError


def test_defaults_apply_when_the_setting_is_absent() -> None:
    with override_settings(DJANGO_JOBS={}):
        settings = get_settings()
    assert settings.lease == timedelta(seconds=30)
    assert settings.CLAIM_BATCH_SIZE == 50


def test_settings_are_read_at_access_time() -> None:
    with override_settings(DJANGO_JOBS={"LEASE_SECONDS": 15}):
        assert get_settings().lease == timedelta(seconds=15)
    assert get_settings().lease == timedelta(seconds=30)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"LEASE_SECONDZ": 5}, "DJANGO_JOBS has unknown key(s) LEASE_SECONDZ"),
        ({"LEASE_SECONDS": 0}, "DJANGO_JOBS['LEASE_SECONDS'] must be greater than 0, got 0"),
        (
            {"LEASE_SECONDS": 10, "TIMEOUT_GRACE_SECONDS": 10},
            "DJANGO_JOBS['TIMEOUT_GRACE_SECONDS'] must be at least 1 s less than LEASE_SECONDS "
            "(10), got 10",
        ),
        ({"CLAIM_BATCH_SIZE": "10"}, "DJANGO_JOBS['CLAIM_BATCH_SIZE'] must be a number"),
        ({"RETENTION_SECONDS": -1}, "DJANGO_JOBS['RETENTION_SECONDS'] must not be negative"),
        ({"RETENTION_BUDGET_SECONDS": 0}, "DJANGO_JOBS['RETENTION_BUDGET_SECONDS'] must be"),
        ({"ONE_OFF_KEEP_SECONDS": 1e15}, "DJANGO_JOBS['ONE_OFF_KEEP_SECONDS'] must be at most"),
        ({"PLAN_AHEAD_SECONDS": 601}, "DJANGO_JOBS['PLAN_AHEAD_SECONDS'] must be at most 600"),
        ({"PLAN_AHEAD_SECONDS": -1}, "DJANGO_JOBS['PLAN_AHEAD_SECONDS'] must not be negative"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(value, message) -> None:
    with override_settings(DJANGO_JOBS=value), pytest.raises(ConfigurationError) as raised:
        get_settings()
    assert str(raised.value).startswith(message)


PAUSED = "DJANGO_JOBS['PAUSED_SCHEDULES']"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "/billing.x",
            f"{PAUSED}: '/billing.x' names no tenant before '/'; the default tenant has no "
            "'<tenant>/' form: name its schedules by their bare keys, which pause them in every "
            "tenant",
        ),
        (
            "acme/",
            f"{PAUSED}: 'acme/' names no key after '/'; write 'acme/<key>' for one schedule of "
            "tenant 'acme' or 'acme/*' for all of them",
        ),
        (
            "acme/billing.*",
            f"{PAUSED}: 'acme/billing.*' is not a pattern: '*' stands alone (every schedule) or "
            "as '<tenant>/*' (every schedule of a tenant); write a bare key to pause it in every "
            "tenant",
        ),
        ("*/billing.x", f"{PAUSED}: '*/billing.x' is not a pattern"),
    ],
)
def test_malformed_kill_switch_entries_are_refused_naming_the_entry(entry, message) -> None:
    value = {"PAUSED_SCHEDULES": ["billing.ok", entry]}
    with override_settings(DJANGO_JOBS=value), pytest.raises(ConfigurationError) as raised:
        get_settings()
    assert str(raised.value).startswith(message)


def test_kill_switch_accepts_keys_tenant_keys_and_stars() -> None:
    entries = ["*", "billing.x", "acme/billing.x", "acme/*", "acme/reports/daily"]
    with override_settings(DJANGO_JOBS={"PAUSED_SCHEDULES": entries}):
        settings = get_settings()
    assert settings.PAUSED_SCHEDULES == (
        "*",
        "billing.x",
        "acme/billing.x",
        "acme/*",
        "acme/reports/daily",
    )


def test_check_e002_refuses_use_tz_false() -> None:
    with override_settings(USE_TZ=False):
        ids = [m.id for m in run_checks()]
    assert "django_jobs.E002" in ids


def test_check_e003_reports_invalid_settings() -> None:
    with override_settings(DJANGO_JOBS={"POLL_SECONDS": -1}):
        messages = [m for m in run_checks() if m.id == "django_jobs.E003"]
    assert [m.msg for m in messages] == [
        "DJANGO_JOBS['POLL_SECONDS'] must be greater than 0, got -1"
    ]


def test_check_e003_reports_a_malformed_kill_switch_entry() -> None:
    with override_settings(DJANGO_JOBS={"PAUSED_SCHEDULES": ["acme/"]}):
        messages = [m for m in run_checks() if m.id == "django_jobs.E003"]
    assert [m.msg for m in messages] == [
        "DJANGO_JOBS['PAUSED_SCHEDULES']: 'acme/' names no key after '/'; write 'acme/<key>' "
        "for one schedule of tenant 'acme' or 'acme/*' for all of them"
    ]


@pytest.mark.django_db
def test_check_e001_is_quiet_on_postgresql() -> None:
    assert [m.id for m in run_checks(databases=["default"]) if m.id == "django_jobs.E001"] == []
