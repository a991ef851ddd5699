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
    with override_settings(DJANGO_JOBS={"LEASE_SECONDS": 5}):
        assert get_settings().lease == timedelta(seconds=5)
    assert get_settings().lease == timedelta(seconds=30)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"LEASE_SECONDZ": 5}, "DJANGO_JOBS has unknown key(s) LEASE_SECONDZ"),
        ({"LEASE_SECONDS": 0}, "DJANGO_JOBS['LEASE_SECONDS'] must be greater than 0, got 0"),
        ({"CLAIM_BATCH_SIZE": "10"}, "DJANGO_JOBS['CLAIM_BATCH_SIZE'] must be a number"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(value, message) -> None:
    with override_settings(DJANGO_JOBS=value), pytest.raises(ConfigurationError) as raised:
        get_settings()
    assert str(raised.value).startswith(message)


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


@pytest.mark.django_db
def test_check_e001_is_quiet_on_postgresql() -> None:
    assert [m.id for m in run_checks(databases=["default"]) if m.id == "django_jobs.E001"] == []
