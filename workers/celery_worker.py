"""Entry point for ``celery -A workers.celery_worker worker`` (``jobservice worker`` runs it for you)."""

from workers.bootstrap import bootstrap

app = bootstrap()
