"""Entry point for ``celery -A jobservice.batches.control_app worker -B`` (``jobservice beat`` runs it)."""

from jobservice.batches.control import make_control_app

app = make_control_app()
