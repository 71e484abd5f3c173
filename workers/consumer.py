"""The worker's Celery consumer, reconnecting to the broker promptly.

Celery's consumer waits 2, 4, 6 ... up to 30 s between attempts to reach a broker that went away,
so after Redis is restarted a worker could sit idle for half a minute while jobs queue up. This
consumer retries every ``RECONNECT_MAX_SECONDS`` at most (a refused connection costs nothing), and
``broker_connection_max_retries=None`` (jobservice.broker) means it never gives up.
"""

from __future__ import annotations

from typing import Any

from celery.worker.consumer import Consumer

RECONNECT_FIRST_SECONDS = 0.5
RECONNECT_STEP_SECONDS = 0.5
RECONNECT_MAX_SECONDS = 2.0


class PromptConsumer(Consumer):
    """A Celery consumer whose broker reconnects back off to 2 s, not 30 s."""

    def ensure_connected(self, conn: Any) -> Any:
        """Celery's ``ensure_connected`` with short retry intervals."""
        original = conn.ensure_connection

        def prompt(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("interval_start", RECONNECT_FIRST_SECONDS)
            kwargs.setdefault("interval_step", RECONNECT_STEP_SECONDS)
            kwargs.setdefault("interval_max", RECONNECT_MAX_SECONDS)
            return original(*args, **kwargs)

        conn.ensure_connection = prompt
        return super().ensure_connected(conn)
