"""One run of ``manage.py jobs``: its options, its output, and who runs it (``--actor``).

Without ``--actor``, the command acts as ``DJANGO_JOBS["CLI_ACTOR"]``, else as the Django user
whose username is the OS user's name (audited as that user either way); with neither, it says
what to do.

``--actor`` is self-asserted: whoever can run ``manage.py`` holds the database credentials and
is trusted in full. ``DJANGO_JOBS["CLI_ACTOR_RULES"]`` narrows whom it may name (the OS user's
own name, no superuser), so the audit trail says who ran the command, not merely who they
claimed to be. The OS user is the process's effective uid's account, never ``$LOGNAME`` or
``$USER``, which whoever starts the command sets as they please.
"""

from __future__ import annotations

import json
import os
import pwd
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError, OutputWrapper

from .. import services
from ..conf import get_settings
from ..exceptions import JobsError
from ..models import Schedule
from ..suggest import did_you_mean


@dataclass
class Invocation:
    """What a subcommand works with: the parsed options and the command's stdout."""

    options: dict[str, Any]
    stdout: OutputWrapper

    def emit(self, data: Any, text: str) -> None:
        """Print ``data`` as JSON with ``--json``, otherwise ``text``."""
        as_json = self.options.get("json")
        self.stdout.write(json.dumps(data, indent=2, default=str) if as_json else text)

    def actor(self) -> Any:
        """The user ``--actor`` names, else ``DJANGO_JOBS["CLI_ACTOR"]``, else the user named
        as the OS user running the command; once ``CLI_ACTOR_RULES`` accept them."""
        settings = get_settings()
        username, given_as = _actor_name(self.options.get("actor"), settings.CLI_ACTOR)
        rules = settings.CLI_ACTOR_RULES
        if "os_user" in rules:
            _need_os_user(username, given_as)
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"{given_as} {username!r} is not a user of this project")
        if "no_superuser" in rules and user.is_superuser:
            raise CommandError(
                f"{given_as} {username!r} is a superuser, and DJANGO_JOBS['CLI_ACTOR_RULES'] "
                "refuses superusers on the command line: act as a user with the permissions "
                "the action needs"
            )
        return user

    def schedule(self, actor: Any, *, key: str | None = None) -> Schedule:
        """The schedule of ``--tenant`` and KEY (or ``key``), if ``actor`` may see it; a
        schedule it may see whose key is close is named when there is none."""
        tenant, key = self.options["tenant"], self.options["key"] if key is None else key
        try:
            return services.find_schedule(actor=actor, tenant=tenant, key=key)
        except JobsError as exc:
            keys = services.visible_schedules(actor=actor, tenant=tenant).values_list(
                "key", flat=True
            )
            close = did_you_mean(key, keys.iterator())
            if not close:
                raise
            raise JobsError(f"{exc}{close}") from None


def os_user() -> str:
    """The name of the OS account running this process: its effective uid's passwd entry.
    Not ``getpass.getuser()``, which believes ``$LOGNAME``/``$USER`` first: root running
    ``LOGNAME=alice manage.py jobs ...`` is root."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # an arbitrary uid without a passwd entry (some container platforms)
        raise CommandError(
            "--actor: DJANGO_JOBS['CLI_ACTOR_RULES'] requires the OS user's name, and uid "
            f"{uid} running this command has no passwd entry: add one for it (the environment's "
            "LOGNAME and USER are not trusted)"
        ) from None


def _need_os_user(username: str, given_as: str = "--actor") -> None:
    """``CLI_ACTOR_RULES`` ``"os_user"``: the actor is the OS user running the command, so an
    operator cannot act, and be audited, under a colleague's name."""
    os_name = os_user()
    if username != os_name:
        raise CommandError(
            f"{given_as} {username!r} is not the OS user running this command ({os_name!r}), "
            "and DJANGO_JOBS['CLI_ACTOR_RULES'] requires it: run it as that user, or act as "
            f"{os_name!r}"
        )


def _actor_name(given: str | None, configured: str | None) -> tuple[str, str]:
    """Who the command acts as, and how it was named (for the messages): ``--actor``, else
    ``DJANGO_JOBS['CLI_ACTOR']``, else the OS user, if a Django user has that name."""
    if given is not None:
        if not given.strip():  # an unset $OPERATOR: never fall back to someone else
            raise CommandError("--actor is empty: name a Django user, or leave --actor out")
        return given, "--actor"
    if configured:
        return configured, "DJANGO_JOBS['CLI_ACTOR']"
    try:
        os_name: str | None = os_user()
    except CommandError:  # a uid without a passwd entry has no name to default to
        os_name = None
    if os_name and get_user_model().objects.filter(username=os_name).exists():
        return os_name, "the OS user"
    if os_name is None:
        raise CommandError(
            "no --actor given, and DJANGO_JOBS['CLI_ACTOR'] is not set (this command's uid "
            f"{os.geteuid()} has no OS user name to default to): pass --actor <username>, or "
            "set DJANGO_JOBS['CLI_ACTOR'] to a Django username"
        )
    raise CommandError(
        "no --actor given, DJANGO_JOBS['CLI_ACTOR'] is not set, and no Django user is named "
        f"{os_name!r} (the OS user running this command): pass --actor <username>, set "
        "DJANGO_JOBS['CLI_ACTOR'] to a Django username, or create a Django user named "
        f"{os_name!r}"
    )
