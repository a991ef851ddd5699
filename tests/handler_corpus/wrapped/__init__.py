"""An app whose ``jobs`` module registers wrapped handlers, installed only by
tests/handler_corpus/settings.py (for ``manage.py check`` in a process of its own)."""
