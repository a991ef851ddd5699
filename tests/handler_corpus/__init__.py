"""Handlers to scan, never registered: ``good`` ones dispatch commands, ``bad`` ones do
what a job must leave to a command. Only their source is read; none of them is run."""
