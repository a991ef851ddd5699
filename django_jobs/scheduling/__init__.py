"""Schedule evaluation: pure functions from a timing and an instant to UTC instants.

Nothing in this package reads a clock or the database: callers pass the instants they reason
about.
"""
