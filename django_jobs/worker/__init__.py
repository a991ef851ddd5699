"""The execution host: ``manage.py runworker`` runs due occurrences through the store."""
