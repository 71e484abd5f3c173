"""Entry point for ``celery -A workers.celery_worker worker`` (``jobservice worker`` runs it for you)."""

from workers.bootstrap import bootstrap

app = bootstrap()
# Reconnect to a broker that went away within seconds of its return (workers/consumer.py).
app.conf.worker_consumer = "workers.consumer:PromptConsumer"
