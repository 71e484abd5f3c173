"""Entry point for ``celery -A jobservice.batches.beat_app worker -B`` (``jobservice beat`` runs it)."""

from jobservice.batches.schedule import make_control_app

app = make_control_app()
