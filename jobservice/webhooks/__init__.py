"""Signed, durable webhooks (Standard Webhooks format) for jobs and batches.

signing.py         the ``webhook-*`` headers: HMAC-SHA256 over ``id.timestamp.body`` with a ``whsec_`` secret
tenant_secrets.py  each tenant's secret: created on first use, rotated with a grace period
targets.py         which URLs a webhook may target (SSRF): shape at submission, addresses at delivery
deliver.py         one POST to an address that was checked (no redirects, short timeouts, bounded reads)
outbox.py          the ``webhook_deliveries`` rows: enqueue in the caller's transaction, due rows,
                   claims, results and the retry schedule
tasks.py           the Celery task ``jobservice.deliver_webhook`` and the beat's sweep

Delivery is at least once: a receiver dedupes by ``webhook-id``. Rows of one job (or batch) go out
in the order they were written; a later one waits while an earlier one is still being retried.
Imports db, errors and settings only (never jobs, batches or the surfaces).
"""
