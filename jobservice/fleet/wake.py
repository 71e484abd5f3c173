"""The dispatcher's bell: a hint, rung by whoever records work, that a dispatch round is due.

A request never runs a dispatch round: it would wait on the fleet-wide lock behind every other
dispatcher. ``POST /jobs`` and ``POST /job-groups`` commit their rows (the row is the queue) and,
when a card group that may run the work looks free, ring the bell: one Redis list key in the
broker's database holding at most one token, so a burst of submissions is one round, not hundreds.
Every worker's dispatcher (``workers.dispatcher``) waits on the key (``BLPOP``: one of them takes
the token) and runs the round at once, so a free group still takes a new job the moment it is
recorded. The bell is only a hint: a ring that is lost (Redis away, no worker listening) costs
nothing but time, because every worker's upkeep runs a round every few seconds anyway, and a
group whose job ends runs one too.
"""

from __future__ import annotations

import logging

import redis

from jobservice.broker import redis_client
from jobservice.settings import Settings

log = logging.getLogger(__name__)

KEY = "jobservice:dispatch:wake"
RING_TIMEOUT_SECONDS = 1.0  # a request gives up on the hint after this long (the upkeep round follows)


class DispatchBell:
    """The bell on one Redis database (the broker's): ``ring`` from a request, ``wait`` in a worker."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._ringer: redis.Redis | None = None
        self._listener: redis.Redis | None = None
        self._listen_timeout = 0.0

    def ring(self) -> None:
        """Ask for a dispatch round (at most one token waits; raises when Redis does not answer)."""
        if self._ringer is None:
            self._ringer = redis_client(
                self._settings.broker_url,
                timeout=RING_TIMEOUT_SECONDS,
                sentinel_master=self._settings.broker_sentinel_master,
            )
        pipe = self._ringer.pipeline(transaction=False)
        pipe.lpush(KEY, b"1")
        pipe.ltrim(KEY, 0, 0)
        pipe.execute()

    def wait(self, timeout: float) -> bool:
        """Block until the bell rings (True: this caller took the token) or ``timeout`` seconds pass."""
        if self._listener is None or self._listen_timeout < timeout:
            self._listen_timeout = timeout
            self._listener = redis_client(
                self._settings.broker_url,
                timeout=timeout + 5.0,  # the socket outlives the blocking call
                sentinel_master=self._settings.broker_sentinel_master,
            )
        return self._listener.blpop([KEY], timeout=timeout) is not None

    def close(self) -> None:
        """Drop both connections."""
        for client in (self._ringer, self._listener):
            if client is not None:
                client.close()
        self._ringer = self._listener = None
