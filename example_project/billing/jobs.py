"""Job handlers of the billing app: they dispatch the app's commands, nothing else."""

from __future__ import annotations

from django_jobs import Run, job

from . import statements


# Offered at run time: billing_enable_tenant creates a run-time schedule of it per tenant.
@job("billing.send_statements", runtime=True)
def send_statements(run: Run) -> None:
    # One transaction: the statement row commits together with the fenced completion.
    with run.atomic():
        statements.send_for(
            run.scheduled_at.date(), idempotency_key=run.occurrence_key, tenant=run.tenant
        )


@job("billing.heartbeat")
def heartbeat(run: Run) -> None:
    with run.atomic():
        statements.beat(run.scheduled_at, idempotency_key=run.occurrence_key)


@job("billing.notify_accountant")
def notify_accountant(run: Run) -> None:
    """An outside effect (a message to the accountant), done once per occurrence."""
    run.raise_if_cancelled()
    run.once(
        "accountant-notified",
        lambda: statements.notify_accountant(run.scheduled_at, idempotency_key=run.occurrence_key),
    )
