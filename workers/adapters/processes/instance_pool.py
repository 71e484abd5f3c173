"""A pool of model-server instances, each running one job at a time (it replaces a load balancer).

vLLM-Omni serves one request at a time per instance (batch size 1; seeds/004). Busy instances
are tracked with a Redis lease per instance: ``SET key token NX PX ttl``, renewed by a thread
while the job runs and released with compare-and-delete, so any number of workers on any number
of hosts can share one pool and none ever sends a second job to a busy instance. A worker that
dies leaves its lease to expire within ``ttl`` seconds. Redis is the broker the workers already
use; without one (a single worker) a process-local set does the same job.

An instance that refuses connections is marked down for a short while so the others are tried.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from workers.adapters.base import AdapterError

log = logging.getLogger(__name__)

# Compare-and-renew / compare-and-delete: only the holder's token may extend or free a lease.
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"  # noqa: E501
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
_LOCAL_BUSY: set[str] = set()
_LOCAL_LOCK = threading.Lock()


class Lease:
    """One instance held for one job; renewed until released."""

    def __init__(self, pool: InstancePool, endpoint: str, token: str) -> None:
        self.pool = pool
        self.endpoint = endpoint
        self.token = token
        self._released = threading.Event()
        self._deferred = False  # an abandoned request still runs on the instance
        self._renewer: threading.Thread | None = None
        if pool.redis is not None:
            self._renewer = threading.Thread(target=self._renew, name="instance-lease", daemon=True)
            self._renewer.start()

    def _renew(self) -> None:
        redis = self.pool.redis
        assert redis is not None
        interval = self.pool.ttl_seconds / 3
        while not self._released.wait(interval):
            try:
                kept = redis.eval(_RENEW, 1, self.pool.key(self.endpoint), self.token, self.pool.ttl_ms)
            except Exception:  # noqa: BLE001 - a Redis hiccup: try again at the next interval
                log.warning("could not renew the lease on %s", self.endpoint, exc_info=True)
                continue
            if not kept:
                log.warning("the lease on %s expired while in use", self.endpoint)

    def release(self) -> None:
        """Give the instance back (idempotent; deferred while an abandoned request still runs)."""
        if not self._deferred:
            self._release_now()

    def _release_now(self) -> None:
        if self._released.is_set():
            return
        self._released.set()
        self.pool._release(self.endpoint, self.token)

    def release_when_done(self, thread: threading.Thread) -> None:
        """Keep the instance until ``thread`` (an abandoned request it is still serving) ends."""
        self._deferred = True

        def wait_then_release() -> None:
            thread.join()
            self._release_now()

        threading.Thread(target=wait_then_release, name="instance-lease-hold", daemon=True).start()


class InstancePool:
    """Endpoints of one model's server instances."""

    def __init__(
        self,
        endpoints: list[str],
        *,
        redis: Any | None,
        namespace: str = "jobservice:instance:",
        ttl_seconds: float = 30.0,
        down_seconds: float = 15.0,
    ) -> None:
        self.endpoints = list(endpoints)
        self.redis = redis
        self.namespace = namespace
        self.ttl_seconds = ttl_seconds
        self.ttl_ms = int(ttl_seconds * 1000)
        self.down_seconds = down_seconds
        self._down_until: dict[str, float] = {}

    def key(self, endpoint: str) -> str:
        """The Redis key of an instance's lease."""
        return f"{self.namespace}busy:{endpoint}"

    def holder(self, endpoint: str) -> str | None:
        """Who holds ``endpoint`` now (tests and diagnostics)."""
        if self.redis is None:
            return "local" if endpoint in _LOCAL_BUSY else None
        value = self.redis.get(self.key(endpoint))
        return value.decode() if isinstance(value, bytes) else value

    def mark_down(self, endpoint: str) -> None:
        """Skip ``endpoint`` for a while (it refused a connection)."""
        self._down_until[endpoint] = time.monotonic() + self.down_seconds

    def acquire(
        self,
        *,
        owner: str,
        check_cancel: Callable[[], None],
        timeout: float | None,
        poll_seconds: float = 0.25,
    ) -> Lease:
        """Wait for an idle instance and hold it; ``timeout`` None waits as long as the job may."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            for endpoint in self._order():
                token = f"{owner}/{uuid.uuid4().hex[:12]}"
                if self._try(endpoint, token):
                    return Lease(self, endpoint, token)
            check_cancel()
            if deadline is not None and time.monotonic() > deadline:
                raise AdapterError(
                    "no_instance_available",
                    f"All {len(self.endpoints)} instance(s) stayed busy or down for {timeout:g} s.",
                )
            time.sleep(poll_seconds)

    def _order(self) -> list[str]:
        now = time.monotonic()
        up = [e for e in self.endpoints if self._down_until.get(e, 0.0) <= now]
        random.shuffle(up)  # spread jobs over idle instances instead of always the first
        return up

    def _try(self, endpoint: str, token: str) -> bool:
        if self.redis is None:
            with _LOCAL_LOCK:
                if endpoint in _LOCAL_BUSY:
                    return False
                _LOCAL_BUSY.add(endpoint)
                return True
        return bool(self.redis.set(self.key(endpoint), token, nx=True, px=self.ttl_ms))

    def _release(self, endpoint: str, token: str) -> None:
        if self.redis is None:
            with _LOCAL_LOCK:
                _LOCAL_BUSY.discard(endpoint)
            return
        with contextlib.suppress(Exception):  # an unreleased lease expires on its own
            self.redis.eval(_RELEASE, 1, self.key(endpoint), token)
