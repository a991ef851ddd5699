"""Schedule evaluation: pure functions from a timing and an instant to UTC instants.

Nothing in this package reads a clock or the database: callers pass the instants they reason
about.

- ``timings``: builds a timing, reads one back from a record, asks where an instant stands;
  ``timing``: the ``Timing`` protocol, ``InvalidTiming`` and the record columns it writes.
- ``crons`` (the ``cron`` timing) over ``cron`` (naive wall-clock iteration); ``rrules`` (the
  ``rrule`` timing) over ``recurrences`` (RFC 5545 rules), ``recurrence_words`` (a rule in
  words) and ``calendars`` (excluded dates); ``elapsed``: ``every``, ``at``, ``after``.
- ``wall_clock`` and ``zones``: UTC names, DST choices, wall times resolved to instants.
- ``policies``: what a schedule names (misfire, overlap, retry...); ``planner``: what to plan.
"""
