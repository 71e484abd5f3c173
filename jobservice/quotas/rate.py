"""The request rate limit: requests per minute per key (per tenant when auth is off).

Shared by every API process through Redis (the broker's): a fixed one-minute window per caller,
counted with INCR and given an EXPIRE in one round trip. A fixed window lets a caller send up to
twice its limit across a window boundary; that is the accepted price of one key per minute.

Redis being away must not take the API with it: the client has a short socket timeout and no
retries, a failure opens the limiter (requests pass) for ``SKIP_AFTER_FAILURE`` seconds without
trying Redis again, and the failure is logged at most once per ``LOG_EVERY`` seconds.
"""

from __future__ import annotations

import logging
import threading
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from jobservice.auth.principal import Principal
from jobservice.broker import redis_client
from jobservice.errors import TooMany
from jobservice.quotas.limits import Limits, resolve_limits
from jobservice.settings import Settings

log = logging.getLogger(__name__)

WINDOW_SECONDS = 60
SOCKET_TIMEOUT = 0.25  # seconds; a limiter slower than this is worse than none
SKIP_AFTER_FAILURE = 5.0  # seconds during which a failed Redis is not tried again
LOG_EVERY = 60.0  # seconds between two log lines about an unreachable Redis
KEY_PREFIX = "jobservice:rate:"


def rate_subject(principal: Principal) -> str:
    """Who is counted: the key, or the tenant when there is no key (auth off)."""
    return f"key:{principal.key_id}" if principal.key_id else f"tenant:{principal.tenant}"


def window_key(principal: Principal, now: float) -> str:
    """The Redis key counting ``principal``'s requests in the window holding ``now``."""
    return f"{KEY_PREFIX}{rate_subject(principal)}:{int(now // WINDOW_SECONDS)}"


class RateCounter:
    """One process's count of requests in the broker's Redis: its client, and how long Redis is
    skipped after a failure. Kept on the ``Services`` that ``wiring`` builds (``rate_counter``): a
    fresh services object is a fresh process, with a fresh client."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: redis.Redis | None = None
        self._down_until = 0.0
        self._last_logged = -LOG_EVERY
        self._lock = threading.Lock()

    def check(self, principal: Principal, limits: Limits | None = None, *, now: float | None = None) -> None:
        """Count one request of ``principal``; raise TooMany (429 ``rate_limited``) over its limit.

        ``limits`` is ``effective_limits(...)`` when the caller has it (tenant overrides included);
        without it the key's override or the settings' default applies. Never raises for Redis
        trouble."""
        limits = limits or resolve_limits(self.settings, key=principal.limits)
        if not limits.rate_limited:
            return
        limit = limits.requests_per_minute
        now = time.time() if now is None else now
        count = self._count(window_key(principal, now))
        if count is None or count <= limit:
            return
        retry_after = (int(now // WINDOW_SECONDS) + 1) * WINDOW_SECONDS - now
        raise TooMany(
            "rate_limited",
            f"This key may send {limit} requests per minute and has sent {count} in this minute; "
            f"try again in {int(retry_after) + 1} s, or ask an admin for a higher --requests-per-minute.",
            retry_after=retry_after,
            details=[{"limit": "requests_per_minute", "value": limit, "usage": count}],
        )

    def this_minute(self, principal: Principal, *, now: float | None = None) -> int | None:
        """How many requests ``principal`` sent in the current window (None when Redis is away)."""
        now = time.time() if now is None else now
        client = self._usable()
        if client is None:
            return None
        try:
            value = client.get(window_key(principal, now))
        except (redis.RedisError, OSError) as exc:
            self._failed(exc)
            return None
        return int(value) if value is not None else 0

    def close(self) -> None:
        """Close the client (a later call opens another)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _count(self, key: str) -> int | None:
        """INCR ``key`` (expiring after two windows) and return its value; None when Redis failed."""
        client = self._usable()
        if client is None:
            return None
        try:
            pipe = client.pipeline(transaction=False)
            pipe.incr(key)
            pipe.expire(key, 2 * WINDOW_SECONDS)
            count, _ = pipe.execute()
        except (redis.RedisError, OSError) as exc:
            self._failed(exc)
            return None
        return int(count)

    def _usable(self) -> redis.Redis | None:
        """The client, or None while Redis is known to be away."""
        with self._lock:
            if self._down_until > time.monotonic():
                return None
            if self._client is None:
                self._client = redis_client(
                    self.settings.broker_url,
                    timeout=SOCKET_TIMEOUT,
                    sentinel_master=self.settings.broker_sentinel_master,
                )
                self._client.set_retry(Retry(NoBackoff(), 0))  # one try: fail open rather than wait
            return self._client

    def _failed(self, exc: BaseException) -> None:
        now = time.monotonic()
        with self._lock:
            self._down_until = now + SKIP_AFTER_FAILURE
            quiet = now - self._last_logged < LOG_EVERY
            if not quiet:
                self._last_logged = now
        if not quiet:
            log.warning("rate limit not enforced: Redis unreachable (%s); requests pass meanwhile", exc)
