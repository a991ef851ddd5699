"""The form of a run-time schedule: what ``schedule(...)`` takes, as fields.

It builds a ``Declaration`` with ``schedule(..., register=False)`` and hands it to
``services.upsert_schedule``, so a value is refused with the message a declaration in code
gets, shown on the field it names. Instants are ISO 8601, in UTC unless they carry an offset.

Its jobs are those offered at run time (``registry.runtime_names``). A schedule's arguments
are shown redacted, as its page shows them, never raw: what the operator leaves as shown keeps
the stored value (``kept_where_shown``), what they change replaces it. A kept value with
something hidden in it must stay hidden in the saved arguments, and stays with its job: a
change of job needs it typed again.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from django import forms
from django.utils.dateparse import parse_duration

from ..admin_base import json_arguments, redacted
from ..declarations import Declaration, InvalidSchedule, schedule
from ..models import Limit, Schedule, ScheduleStatus
from ..registry import registry
from ..safe_error import REDACTED
from ..scheduling import timings
from ..scheduling.policies import Misfire, Overlap, RepeatedTime, Retry, SkippedTime
from ..scheduling.timing import Timing
from ..validation import REASON_MAX_CHARS, json_text

DURATION_HELP = "[DD] [HH:[MM:]]SS, as Django's DurationField: 00:05:00 is five minutes"
INSTANT_HELP = "ISO 8601, in UTC unless an offset is given: 2027-03-14T09:00"


def _choices(enum: Any, *, blank: str | None = None) -> list[tuple[str, str]]:
    given = [(member.value, member.value.replace("_", " ")) for member in enum]
    return [("", blank), *given] if blank is not None else given


class DurationText(forms.CharField):
    """A duration as Django's DurationField reads it, refused with the field's name."""

    def to_python(self, value: Any) -> timedelta | None:  # type: ignore[override]
        text = (super().to_python(value) or "").strip()
        if not text:
            return None
        try:
            parsed = parse_duration(text)
        except OverflowError:  # more days than a timedelta holds
            parsed = None
        if parsed is None:
            raise forms.ValidationError(f"{text!r} is not a duration ({DURATION_HELP})")
        return parsed


class InstantText(forms.CharField):
    """An ISO 8601 instant; naive means UTC (never the server's local time)."""

    def to_python(self, value: Any) -> datetime | None:  # type: ignore[override]
        text = (super().to_python(value) or "").strip()
        if not text:
            return None
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise forms.ValidationError(f"{text!r} is not an instant ({INSTANT_HELP})") from None
        if parsed.tzinfo is None:
            return parsed.replace(tzinfo=UTC)
        try:
            return parsed.astimezone(UTC)
        except OverflowError:  # past the calendar's ends in UTC: the timing refuses it by name
            return parsed


def kind_choices() -> list[tuple[str, str]]:
    """The timings a form can give: every registered kind (a job's policy record,
    ``enqueued``, is no timing, and never edited here)."""
    return [(kind, kind) for kind in timings.kinds()]


KINDS = kind_choices()

# Where a declaration's field (InvalidSchedule.field) is shown on the form.
_FIELD_OF = {
    "timing.cron": "cron",
    "timing.rule": "rrule",
    "timing.rrule": "rrule",
    "timing.zone": "time_zone",
    "timing.time_zone": "time_zone",
    "timing.reason": "zone_reason",
    "timing.zone_reason": "zone_reason",
    "timing.skipped": "skipped_time",
    "timing.skipped_time": "skipped_time",
    "timing.repeated": "repeated_time",
    "timing.repeated_time": "repeated_time",
    "timing.interval": "interval",
    "timing.anchor": "anchor",
    "timing.at": "run_at",
    "timing.after": "delay",
    "timing.instant": "run_at",
    "timing.run_at": "run_at",
    "timing.delay": "delay",
    "retry.max_attempts": "max_attempts",
    "retry.backoff": "backoff",
    "retry.max_backoff": "max_backoff",
    "retention": "keep_for",
}


# The form's groups of fields, as the page shows them.
SECTIONS = (
    ("Schedule", ("tenant", "key", "job", "args", "priority")),
    (
        "When it runs",
        (
            "timing_kind",
            "cron",
            "rrule",
            "time_zone",
            "zone_reason",
            "skipped_time",
            "repeated_time",
            "interval",
            "anchor",
            "run_at",
            "delay",
        ),
    ),
    (
        "Policies",
        (
            "max_delay",
            "misfire",
            "max_catchup",
            "overlap",
            "max_attempts",
            "backoff",
            "max_backoff",
            "timeout",
            "keep_for",
            "keep_last",
        ),
    ),
    ("Record", ("operating_owner", "record_owner", "status", "decider", "decide_by")),
    ("Why", ("reason",)),
)


class ScheduleForm(forms.Form):
    """Create a run-time schedule, or change one (``record``: its row; tenant and key, its
    identity, are then fixed)."""

    tenant = forms.CharField(required=False, max_length=100)
    key = forms.CharField(max_length=200)
    job = forms.ChoiceField()
    timing_kind = forms.ChoiceField(label="Timing", choices=KINDS)
    cron = forms.CharField(required=False, help_text="five fields: 0 9 * * 1-5")
    rrule = forms.CharField(
        label="Calendar rule",
        required=False,
        help_text="RFC 5545: FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=18",
    )
    time_zone = forms.CharField(initial="UTC", help_text="an IANA zone: America/New_York")
    zone_reason = forms.CharField(
        required=False, help_text="why a local zone (a business rule): needed unless UTC"
    )
    skipped_time = forms.ChoiceField(
        required=False,
        choices=_choices(SkippedTime, blank="(choose for a local zone)"),
        help_text="a local time the spring change skips",
    )
    repeated_time = forms.ChoiceField(
        required=False,
        choices=_choices(RepeatedTime, blank="(choose for a local zone)"),
        help_text="a local time the autumn change repeats",
    )
    interval = DurationText(required=False, help_text=DURATION_HELP)
    anchor = InstantText(required=False, help_text=f"interval phase; {INSTANT_HELP}")
    run_at = InstantText(label="Run at", required=False, help_text=INSTANT_HELP)
    delay = DurationText(required=False, help_text=f"after creation; {DURATION_HELP}")

    args = forms.CharField(
        label="Arguments",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="a JSON object the job gets as run.args",
    )
    priority = forms.IntegerField(initial=0, min_value=-100, max_value=100)
    max_delay = DurationText(initial="00:05:00", help_text=DURATION_HELP)
    misfire = forms.ChoiceField(choices=_choices(Misfire), initial=Misfire.SKIP)
    max_catchup = forms.IntegerField(initial=100, min_value=0)
    overlap = forms.ChoiceField(choices=_choices(Overlap), initial=Overlap.SKIP)
    max_attempts = forms.IntegerField(initial=3, min_value=1)
    backoff = DurationText(initial="00:00:30", help_text=DURATION_HELP)
    max_backoff = DurationText(initial="00:10:00", help_text=DURATION_HELP)
    timeout = DurationText(initial="00:15:00", help_text=DURATION_HELP)
    keep_for = DurationText(
        label="Keep occurrences for", required=False, help_text=f"retention; {DURATION_HELP}"
    )
    keep_last = forms.IntegerField(
        label="Or keep the last", required=False, min_value=1, help_text="occurrences"
    )

    operating_owner = forms.CharField(max_length=200)
    record_owner = forms.CharField(max_length=200)
    status = forms.ChoiceField(choices=ScheduleStatus.choices, initial=ScheduleStatus.ACTIVE)
    decider = forms.CharField(required=False, max_length=200)
    decide_by = forms.DateField(required=False, help_text="YYYY-MM-DD")

    reason = forms.CharField(
        max_length=REASON_MAX_CHARS,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text="Why? Kept in the audit record.",
    )

    def __init__(self, *args: Any, record: Schedule | None = None, **kwargs: Any) -> None:
        self.record = record
        if record is not None:
            kwargs.setdefault("initial", initial(record))
        super().__init__(*args, **kwargs)
        # Only the jobs whose code offers them at run time (the service refuses any other).
        self.fields["job"].choices = [(name, name) for name in registry.runtime_names()]  # type: ignore[attr-defined]
        self.fields["timing_kind"].choices = kind_choices()  # type: ignore[attr-defined]
        if record is not None:
            for name in ("tenant", "key"):
                self.fields[name].disabled = True
        self.declaration: Declaration | None = None

    def sections(self) -> list[tuple[str, list[forms.BoundField]]]:
        """The fields in the groups the page shows them in."""
        return [(heading, [self[name] for name in names]) for heading, names in SECTIONS]

    def clean_args(self) -> dict[str, Any]:
        given = json_arguments(self.cleaned_data["args"]) or {}
        if self.record is None or not self.record.args:
            return given
        try:
            job = self.cleaned_data.get("job", self.record.job)
            return kept_where_shown(given, self.record.args, job=job, stored_job=self.record.job)
        except ValueError as exc:
            raise forms.ValidationError(f"arguments: {exc}") from None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            self.declaration = self._declaration(data)
        except InvalidSchedule as exc:
            self.refuse(exc)
        return data

    def refuse(self, exc: InvalidSchedule) -> None:
        """Show a declaration's refusal on the field it names (the whole message: it names
        the schedule and the field, as ``jobs sync`` and the checks say it)."""
        name = _FIELD_OF.get(exc.field, exc.field)
        self.add_error(name if name in self.fields else None, str(exc))

    def _declaration(self, data: dict[str, Any]) -> Declaration:
        retention: timedelta | int | None = data["keep_for"] or data["keep_last"]
        if retention is None or (data["keep_for"] and data["keep_last"]):
            raise InvalidSchedule(
                data["key"], "retention", "give one of: keep occurrences for, keep the last"
            )
        return schedule(
            data["key"],
            tenant=data["tenant"],
            job=data["job"],
            timing=self._timing(data),
            operating_owner=data["operating_owner"],
            record_owner=data["record_owner"],
            status=data["status"],
            retention=retention,
            max_delay=data["max_delay"],
            misfire=data["misfire"],
            max_catchup=data["max_catchup"],
            overlap=data["overlap"],
            retry=Retry(data["max_attempts"], data["backoff"], data["max_backoff"]),
            timeout=data["timeout"],
            decider=data["decider"],
            decide_by=data["decide_by"],
            args=data["args"],
            priority=data["priority"],
            register=False,
        )

    def _timing(self, data: dict[str, Any]) -> Timing:
        """The timing of the kind chosen, made by that kind from the columns the form gives
        (``Timing.from_form``) and, for those it does not show, the record's own."""
        kind = timings.kind_of(data["timing_kind"])
        if kind is None:
            raise InvalidSchedule(data["key"], "timing_kind", "not a timing kind")
        needed = kind.form_fields[0]
        if data.get(needed) in (None, ""):
            raise InvalidSchedule(data["key"], needed, f"needed for a {data['timing_kind']} timing")
        return kind.from_form({**self._kept_columns(), **data})

    def _kept_columns(self) -> dict[str, Any]:
        """The record's columns the form does not show (an ``rrule``'s business calendar):
        a change keeps them."""
        if self.record is None:
            return {}
        return {
            column.attname: getattr(self.record, column.attname)
            for column in Schedule._meta.concrete_fields
            if column.attname not in self.fields
        }


def shown_arguments(args: dict[str, Any]) -> str:
    """A record's arguments as the form shows them: redacted, as the schedule's page does."""
    return redacted(args) if args else ""


def kept_where_shown(
    given: dict[str, Any], stored: dict[str, Any], *, job: str = "", stored_job: str = ""
) -> dict[str, Any]:
    """The arguments to save from ``given`` (what the form sent) and ``stored`` (the record's):
    a value left as the form showed it (``shown_arguments``, redacted) keeps its stored value,
    so saving never writes ``[redacted]`` over a secret; a changed one replaces it; a key
    removed is removed. Refused (``ValueError``, naming where):

    - a changed value that still holds ``[redacted]``: it would store the marker, not the secret;
    - a value kept with something hidden in it that the saved arguments would show (it was
      hidden because of a neighbour the edit changed: an AWS secret beside its key id);
    - a value kept with something hidden in it while ``job`` is not ``stored_job``: a secret
      is given to the job it was stored for, never to one the editor picks."""
    shown, problem = json_text(shown_arguments(stored))
    if problem is not None or not isinstance(shown, dict):
        shown = None  # the redaction cut through JSON: nothing is kept unless typed again
    hidden: list[tuple[str | int, ...]] = []  # where a kept value had something hidden
    merged: dict[str, Any] = _kept(given, shown, stored, (), hidden)
    if hidden and job != stored_job:
        raise ValueError(
            f"{_where(hidden[0])} is kept as stored for job {stored_job!r}, but the job is "
            f"now {job!r}: type it again to give it to another job"
        )
    again, problem = json_text(shown_arguments(merged))
    for at in hidden:
        if problem is not None or _at(again, at) != _at(shown, at):
            raise ValueError(
                f"{_where(at)} was hidden because of the values beside it, which this edit "
                "changes, so saving would show it: type it again or leave its neighbours "
                "unchanged"
            )
    return merged


def _kept(given: Any, shown: Any, stored: Any, at: tuple[str | int, ...], hidden: list[Any]) -> Any:
    if shown is not None and given == shown:
        _hidden_in(shown, stored, at, hidden)
        return stored  # unchanged as shown: the stored value, secrets and all
    if isinstance(given, dict) and isinstance(shown, dict) and isinstance(stored, dict):
        return {
            k: _kept(v, shown[k], stored[k], (*at, k), hidden)
            if k in shown and k in stored
            else _typed(v, (*at, k))
            for k, v in given.items()
        }
    lists = all(isinstance(v, list) for v in (given, shown, stored))
    if lists and len(given) == len(shown) == len(stored):
        return [
            _kept(g, sh, st, (*at, n), hidden)
            for n, (g, sh, st) in enumerate(zip(given, shown, stored, strict=True))
        ]
    return _typed(given, at)


def _hidden_in(shown: Any, stored: Any, at: tuple[str | int, ...], hidden: list[Any]) -> None:
    """Add to ``hidden`` each place (the deepest one) where ``shown`` hides part of ``stored``."""
    if shown == stored:
        return
    if isinstance(shown, dict) and isinstance(stored, dict) and shown.keys() == stored.keys():
        for k in shown:
            _hidden_in(shown[k], stored[k], (*at, k), hidden)
    elif isinstance(shown, list) and isinstance(stored, list) and len(shown) == len(stored):
        for n, (sh, st) in enumerate(zip(shown, stored, strict=True)):
            _hidden_in(sh, st, (*at, n), hidden)
    else:
        hidden.append(at)


def _typed(value: Any, at: tuple[str | int, ...]) -> Any:
    """A value the operator typed (not left as shown): refused if it still holds the marker."""
    if REDACTED in json.dumps(value, ensure_ascii=False):
        raise ValueError(
            f"{_where(at)} holds {REDACTED} but is not the value shown: type the whole value again"
        )
    return value


def _where(at: tuple[str | int, ...]) -> str:
    """A place in the arguments as a message names it: ``args['aws'][1]``."""
    return "args" + "".join(f"[{step!r}]" for step in at)


_NOWHERE = object()


def _at(value: Any, at: tuple[str | int, ...]) -> Any:
    """What ``value`` holds at ``at`` (``_NOWHERE`` if it holds nothing there)."""
    for step in at:
        if isinstance(step, int):
            if not isinstance(value, list) or step >= len(value):
                return _NOWHERE
        elif not isinstance(value, dict) or step not in value:
            return _NOWHERE
        value = value[step]
    return value


def _duration(value: timedelta | None) -> str:
    if value is None:
        return ""
    days, rest = divmod(int(value.total_seconds()), 86400)
    hours, rest = divmod(rest, 3600)
    clock = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{days} {clock}" if days else clock


def _form_fields(kind: str) -> tuple[str, ...]:
    """The columns the form fills for a timing of ``kind`` (none for one not registered)."""
    registered = timings.kind_of(kind)
    return () if registered is None else registered.form_fields


def initial(record: Schedule) -> dict[str, Any]:
    """The form's fields as ``record`` holds them."""
    limit = Limit.objects.filter(schedule=record).first()
    at = record.run_at.isoformat() if record.run_at else ""
    return {
        "tenant": record.tenant,
        "key": record.key,
        "job": record.job,
        "timing_kind": record.timing_kind,
        "cron": record.cron,
        "rrule": record.rrule,
        "time_zone": record.time_zone,
        "zone_reason": record.zone_reason,
        "skipped_time": record.skipped_time,
        "repeated_time": record.repeated_time,
        "interval": _duration(record.interval),
        "anchor": record.anchor.isoformat() if record.anchor else "",
        "run_at": at if "run_at" in _form_fields(record.timing_kind) else "",  # not after()'s
        "delay": _duration(record.delay),
        "args": shown_arguments(record.args),
        "priority": record.priority,
        "max_delay": _duration(record.max_delay),
        "misfire": record.misfire,
        "max_catchup": record.max_catchup,
        "overlap": record.overlap,
        "max_attempts": record.max_attempts,
        "backoff": _duration(record.backoff),
        "max_backoff": _duration(record.max_backoff),
        "timeout": _duration(record.timeout),
        "keep_for": _duration(limit.keep_for) if limit else "",
        "keep_last": limit.keep_last if limit else None,
        "operating_owner": record.operating_owner,
        "record_owner": record.record_owner,
        "status": record.status,
        "decider": record.decider,
        "decide_by": record.decide_by,
    }
