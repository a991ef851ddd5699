"""One-off schedules declared at run time, through the service layer, as an application does:
``django_jobs.services.upsert_schedule``, acting as a Django user who may add schedules.

The injector's ``late_one_off``, ``poison`` and ``hang`` faults run this in a process of its
own (the runner is no Django process): ``python -m bench.chaos.declare SPECS_JSON`` declares
each spec and prints what it wrote, as JSON, on its last line. A spec's instant is given as a
lag behind the moment of its declaration (``lag_s``; negative: in the future), so that a
one-off declared ``lag_s`` after its instant is exactly that, however long this process took
to start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from typing import Any

from ..postgres import ROOT

ACTOR = "chaos-operator"
TIMEOUT_S = 120.0


def declare(env: dict[str, str], specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Declare ``specs`` in a Django process of their own; what each wrote (its schedule id,
    instant and creation), in order. Raises ``RuntimeError`` if the process fails."""
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "bench.chaos.declare", json.dumps(specs)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"declaring {specs} failed: {done.stderr.strip()[-2000:]}")
    written: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return written


def _actor() -> Any:
    """The campaign's operator: a user allowed to create schedules (``add_schedule``)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    user, created = get_user_model().objects.get_or_create(username=ACTOR)
    if created:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="django_jobs", codename="add_schedule")
        )
        user = get_user_model().objects.get(pk=user.pk)  # a fresh permission cache
    return user


def _declare_one(spec: dict[str, Any], actor: Any) -> dict[str, Any]:
    from django_jobs import Misfire, Overlap, Retry, at, schedule
    from django_jobs.services import now, upsert_schedule

    moment = now()
    instant = moment - timedelta(seconds=spec["lag_s"])
    second = timedelta(seconds=1)
    declaration = schedule(
        spec["key"],
        job=spec["job"],
        timing=at(instant),
        max_delay=timedelta(seconds=spec["max_delay_s"]),
        misfire=Misfire(spec.get("misfire", "skip")),
        overlap=Overlap(spec.get("overlap", "skip")),
        retry=Retry(max_attempts=spec["max_attempts"], backoff=second, max_backoff=second),
        timeout=timedelta(seconds=spec["timeout_s"]),
        retention=timedelta(days=7),
        operating_owner="chaos-campaign",
        record_owner="reliability@example.com",
        status="active",
        register=False,
    )
    row = upsert_schedule(
        declaration, actor=actor, reason=f"fault campaign: {spec['why']}", now=moment
    )
    return {
        **spec,
        "schedule_id": row.pk,
        "run_at": instant.isoformat(),
        "declared_at": moment.isoformat(),
    }


def main(specs: list[dict[str, Any]]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.chaos.settings")
    import django

    django.setup()
    actor = _actor()
    written = [_declare_one(spec, actor) for spec in specs]
    print(json.dumps(written), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(json.loads(sys.argv[1])))
