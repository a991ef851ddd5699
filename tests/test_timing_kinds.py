"""A timing kind is one class and its registration (``scheduling.timing.register``): a record
of it is read back, the console's form builds it, its words and next runs describe it, and
what it is (wall-clock, one-off) is asked of the protocol, never by ``isinstance`` or by its
name, outside the few places named in ``KIND_BRANCHES``."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar, Self

import pytest

from django_jobs.console.forms import ScheduleForm
from django_jobs.scheduling import timing_words, timings, upcoming
from django_jobs.scheduling.crons import Cron
from django_jobs.scheduling.policies import TimingKind
from django_jobs.scheduling.timing import check_instant, register, registered, unregister
from django_jobs.scheduling.timing_words import TimingWords

from .console_forms import form_data

NOW = datetime(2027, 3, 3, 12, 0, tzinfo=UTC)
FIRST = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Weekly:
    """A throw-away UTC kind: every week from ``first``, stored in the ``anchor`` column."""

    first: datetime
    kind: str = "weekly"
    wall_clock: ClassVar[bool] = False
    one_off: ClassVar[bool] = False
    fixed_instant: ClassVar[bool] = False
    form_fields: ClassVar[tuple[str, ...]] = ("anchor",)
    zone: ClassVar[str] = "UTC"
    local: ClassVar[bool] = False
    reason: ClassVar[str] = ""
    chosen: ClassVar[frozenset[str]] = frozenset()
    _valid: bool = field(default=False, init=False, repr=False, compare=False)

    def validate(self) -> Self:
        check_instant("timing.anchor", self.first)
        return self

    def _weeks(self) -> timings.Every:
        return timings.every(timedelta(weeks=1), anchor=self.first)

    def between(self, start: datetime, end: datetime) -> list[datetime]:
        return self._weeks().between(start, end)

    def count_between(self, start: datetime, end: datetime) -> int:
        return self._weeks().count_between(start, end)

    def iter_from(self, start: datetime) -> Iterator[datetime]:
        return self._weeks().iter_from(start)

    def record_fields(self) -> dict[str, Any]:
        return {**self._weeks().record_fields(), "timing_kind": self.kind, "interval": None}

    def created(self, instant: datetime) -> Self:
        return self

    def words(self, *, now: datetime) -> TimingWords:
        return TimingWords(f"weekly from {self.first:%Y-%m-%d %H:%M} UTC", "")

    @classmethod
    def from_record(cls, fields: Any) -> Weekly:
        return cls(fields.anchor)

    @classmethod
    def from_form(cls, data: Mapping[str, Any]) -> Weekly:
        return cls(data["anchor"])


@pytest.fixture
def weekly() -> Iterator[type[Weekly]]:
    register(Weekly)
    try:
        yield Weekly
    finally:
        unregister("weekly")


def test_every_timing_kind_has_exactly_one_registered_reader() -> None:
    planned = {kind.value for kind in TimingKind} - {TimingKind.ENQUEUED.value}
    assert set(registered()) == planned
    for name, cls in registered().items():
        assert cls.__dict__["kind"] == name
        assert "from_record" in cls.__dict__  # its own reader, not one inherited

    @dataclass(frozen=True)
    class SecondCron(Cron):
        pass

    with pytest.raises(ValueError, match="'cron' is registered already"):
        register(SecondCron)
    assert registered()["cron"] is Cron


def test_a_registered_kind_is_read_back_from_its_record(weekly: type[Weekly]) -> None:
    stored = SimpleNamespace(**Weekly(FIRST).record_fields())
    assert stored.timing_kind == "weekly"
    read = timings.from_record(stored)
    assert read == Weekly(FIRST)
    assert read.between(FIRST, FIRST + timedelta(weeks=2)) == [FIRST, FIRST + timedelta(weeks=1)]


def test_an_unregistered_kind_is_refused_by_name() -> None:
    stored = SimpleNamespace(**Weekly(FIRST).record_fields())
    with pytest.raises(ValueError, match="unknown timing kind 'weekly'"):
        timings.from_record(stored)


@pytest.mark.django_db
def test_the_console_form_offers_and_builds_a_registered_kind(weekly: type[Weekly]) -> None:
    form = ScheduleForm(data=form_data(timing_kind="weekly", cron="", anchor=FIRST.isoformat()))
    assert ("weekly", "weekly") in form.fields["timing_kind"].choices  # type: ignore[attr-defined]
    form.is_valid()
    assert "timing_kind" not in form.errors
    assert form._timing(form.cleaned_data) == Weekly(FIRST)


@pytest.mark.django_db
def test_the_form_names_the_field_a_registered_kind_needs(weekly: type[Weekly]) -> None:
    form = ScheduleForm(data=form_data(timing_kind="weekly", cron=""))
    assert not form.is_valid()
    assert "needed for a weekly timing" in str(form.errors["anchor"])


def test_every_form_field_of_a_kind_is_a_field_of_the_form() -> None:
    shown = set(ScheduleForm.base_fields)
    for name, cls in timings.kinds().items():
        assert set(cls.form_fields) <= shown, name


def test_words_and_next_runs_describe_a_registered_kind(weekly: type[Weekly]) -> None:
    assert timing_words.describe(Weekly(FIRST), now=NOW).text == "weekly from 2027-03-01 09:00 UTC"
    runs = upcoming.next_runs(Weekly(FIRST), now=NOW, count=2)
    assert [run.at for run in runs] == [FIRST + timedelta(weeks=1), FIRST + timedelta(weeks=2)]
    assert all(run.local.utcoffset() == timedelta(0) and not run.marks for run in runs)


def test_what_a_record_of_a_kind_is_comes_from_its_class(weekly: type[Weekly]) -> None:
    assert timings.one_off_kinds() == {"at", "after"}
    assert timings.fixed_instant_kinds() == {"at"}
    assert not timings.is_local(SimpleNamespace(timing_kind="weekly", time_zone="Europe/Paris"))
    assert timings.is_local(SimpleNamespace(timing_kind="cron", time_zone="Europe/Paris"))
    assert not timings.is_local(SimpleNamespace(timing_kind="rrule", time_zone="Etc/UTC"))
    assert not timings.is_local(SimpleNamespace(timing_kind="enqueued", time_zone="Europe/Paris"))


@dataclass(frozen=True)
class Pinned(Weekly):
    """A throw-away one-off kind whose instant is given (as ``at``'s)."""

    kind: str = "pinned"
    one_off: ClassVar[bool] = True
    fixed_instant: ClassVar[bool] = True


def test_the_kinds_a_record_may_be_are_kept_until_the_registry_changes() -> None:
    """Asked for each record a sync writes (``services.one_offs``): worked out once, and
    again when a kind is registered or unregistered."""
    before = timings.fixed_instant_kinds()
    assert timings.fixed_instant_kinds() is before
    assert timings.one_off_kinds() is timings.one_off_kinds()
    register(Pinned)
    try:
        assert timings.fixed_instant_kinds() == {"at", "pinned"}
        assert timings.one_off_kinds() == {"at", "after", "pinned"}
    finally:
        unregister("pinned")
    assert timings.fixed_instant_kinds() == before == {"at"}
    assert timings.one_off_kinds() == {"at", "after"}


# The branches on a kind that stay, each for a reason of its own; any other ``isinstance`` on
# a timing class or comparison with a kind's name is a kind known outside its module.
KIND_BRANCHES = {
    # arithmetic counting of ``every`` and the business calendar of ``rrule``: optimisations
    # and the rule's own exclusions, which a kind without them does not need
    "django_jobs/scheduling/planner.py": 3,
    # each kind's stored columns, as database constraints (a new kind: a migration anyway)
    "django_jobs/models/schedules.py": 9,
    # the cron expression's and the calendar rule's own system checks (E013, E030...)
    "django_jobs/checks/schedules.py": 2,
    # an rrule's text, rule in words and business calendar, shown beside the timing's words
    "django_jobs/cli/schedules.py": 1,
    "django_jobs/admin.py": 1,
    "django_jobs/runbooks.py": 1,
}
_BRANCH = re.compile(
    r"TimingKind\.(CRON|RRULE|INTERVAL|AT|AFTER)\b"
    r"|isinstance\([^)]*\b(Cron|RRule|Every|At|After)\b"
    r"|timing_kind\s*(==|!=|in|not in)\s*(\(|[\"'](?!enqueued))"
    r"|timing_kind=[\"']|timing_kind__in=\("
)
_KIND_MODULES = {"crons.py", "rrules.py", "elapsed.py", "policies.py"}


def test_no_module_outside_the_kinds_branches_on_a_kind() -> None:
    root = Path(__file__).resolve().parent.parent
    found: dict[str, int] = {}
    for path in sorted((root / "django_jobs").rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if "/migrations/" in relative or (
            "/scheduling/" in relative and path.name in _KIND_MODULES
        ):
            continue
        hits = sum(1 for line in path.read_text().splitlines() if _BRANCH.search(line))
        if hits:
            found[relative] = hits
    assert found == KIND_BRANCHES
