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

_clients: dict[str, redis.Redis] = {}
_down_until: dict[str, float] = {}
_last_logged = 0.0
_lock = threading.Lock()


def rate_subject(principal: Principal) -> str:
    """Who is counted: the key, or the tenant when there is no key (auth off)."""
    return f"key:{principal.key_id}" if principal.key_id else f"tenant:{principal.tenant}"


def window_key(principal: Principal, now: float) -> str:
    """The Redis key counting ``principal``'s requests in the window holding ``now``."""
    return f"{KEY_PREFIX}{rate_subject(principal)}:{int(now // WINDOW_SECONDS)}"


def check_rate(
    settings: Settings, principal: Principal, limits: Limits | None = None, *, now: float | None = None
) -> None:
    """Count one request of ``principal``; raise TooMany (429 ``rate_limited``) over its limit.

    ``limits`` is ``effective_limits(...)`` when the caller has it (tenant overrides included);
    without it the key's override or the settings' default applies. Never raises for Redis trouble.
    """
    limits = limits or resolve_limits(settings, key=principal.limits)
    if not limits.rate_limited:
        return
    limit = limits.requests_per_minute
    now = time.time() if now is None else now
    key = window_key(principal, now)
    count = _count(settings, key)
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


def requests_this_minute(settings: Settings, principal: Principal, *, now: float | None = None) -> int | None:
    """How many requests ``principal`` sent in the current window (None when Redis is away)."""
    now = time.time() if now is None else now
    client = _client(settings)
    if client is None:
        return None
    try:
        value = client.get(window_key(principal, now))
    except (redis.RedisError, OSError) as exc:
        _failed(settings.broker_url, exc)
        return None
    return int(value) if value is not None else 0


def _count(settings: Settings, key: str) -> int | None:
    """INCR ``key`` (expiring after two windows) and return its value; None when Redis failed."""
    url = settings.broker_url
    client = _client(settings)
    if client is None:
        return None
    try:
        pipe = client.pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, 2 * WINDOW_SECONDS)
        count, _ = pipe.execute()
    except (redis.RedisError, OSError) as exc:
        _failed(url, exc)
        return None
    return int(count)


def _client(settings: Settings) -> redis.Redis | None:
    """This process's client for the broker's Redis, or None while it is known to be away."""
    url = settings.broker_url
    with _lock:
        if _down_until.get(url, 0.0) > time.monotonic():
            return None
        client = _clients.get(url)
        if client is None:
            client = redis_client(
                url, timeout=SOCKET_TIMEOUT, sentinel_master=settings.broker_sentinel_master
            )
            client.set_retry(Retry(NoBackoff(), 0))  # one try: fail open rather than wait
            _clients[url] = client
        return client


def _failed(url: str, exc: BaseException) -> None:
    global _last_logged
    now = time.monotonic()
    with _lock:
        _down_until[url] = now + SKIP_AFTER_FAILURE
        quiet = now - _last_logged < LOG_EVERY
        if not quiet:
            _last_logged = now
    if not quiet:
        log.warning("rate limit not enforced: Redis unreachable (%s); requests pass meanwhile", exc)


def reset() -> None:
    """Forget clients and failures (tests, and after settings change in a process)."""
    with _lock:
        for client in _clients.values():
            client.close()
        _clients.clear()
        _down_until.clear()
