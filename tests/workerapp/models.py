from django.db import models


class Effect(models.Model):
    """One committed effect of a handler. Duplicates are what the tests look for: no unique
    constraint here, so a double execution would show as two rows."""

    occurrence_key = models.CharField(max_length=64)
    token = models.BigIntegerField()
    replica = models.CharField(max_length=200)

    def __str__(self) -> str:
        return f"effect of {self.occurrence_key}"
