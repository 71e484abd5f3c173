"""Entry point for ``celery -A jobservice.nightly.beat_app worker -B`` (``jobservice beat`` runs it)."""

from jobservice.nightly.schedule import make_control_app

app = make_control_app()
