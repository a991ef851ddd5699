"""Handlers registered wrapped: a partial of a function that writes a model itself (W020),
and a partial of a built-in, whose source cannot be read (W025)."""

from __future__ import annotations

import functools

from django_jobs import job

from ..wrappers import WRITES_FOR_ACME

job("wrapped.writes-for-acme")(WRITES_FOR_ACME)
job("wrapped.prints")(functools.partial(print, "statement sent"))
