"""A process's short-lived answers: one small TTL cache, kept on the ``Services`` that ``wiring`` builds.

A few reads are repeated by every request and may be a few seconds old: which key a bearer secret
stands for, a tenant's limit overrides, the free space of the spool, the fleet's stored forecast.
Each is a ``TtlCache`` in ``Caches``, which ``build_services`` makes fresh, so a fresh ``Services``
is a fresh process (tests build one rather than reset module globals), and two apps in one process
(the tests', the embedded stack's) never share answers.

How long each answer is kept is a constant here, not a setting: a revoked key and a tenant's new
limits apply everywhere within ``PRINCIPAL_SECONDS`` and ``OVERRIDES_SECONDS`` (at once in the
process that made the change, which drops its own entry).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from jobservice.auth.principal import Principal

K = TypeVar("K")
V = TypeVar("V")
Clock = Callable[[], float]

PRINCIPAL_SECONDS = 5.0  # a verified (or refused) bearer secret or browser session's key
PRINCIPALS_KEPT = 4096
OVERRIDES_SECONDS = 5.0  # a tenant's limit overrides (jobservice.quotas.limits)
OVERRIDES_KEPT = 4096
FREE_SPACE_SECONDS = 1.0  # os.statvfs of a watched folder (a submission burst needs one)
FORECAST_SECONDS = 1.0  # how often a process looks for a newer stored forecast (jobservice.fleet.eta)


class TtlCache(Generic[K, V]):
    """Answers by key, each kept ``seconds``; at most ``size`` of them (all dropped when it is full)."""

    def __init__(self, seconds: float, size: int, clock: Clock = time.monotonic) -> None:
        self.seconds = seconds
        self.size = size
        self.clock = clock
        self._kept: dict[K, tuple[float, V]] = {}
        self._lock = threading.Lock()

    def get(self, key: K, load: Callable[[V | None], V]) -> V:
        """The answer kept for ``key`` while it is fresh, else ``load(previous)`` (the expired answer
        or None: a loader may hand the same object back when nothing changed), kept from now."""
        now = self.clock()
        with self._lock:
            hit = self._kept.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        value = load(hit[1] if hit is not None else None)
        with self._lock:
            if len(self._kept) >= self.size and key not in self._kept:
                self._kept.clear()
            self._kept[key] = (now + self.seconds, value)
        return value

    def drop(self, key: K) -> None:
        """Forget ``key``'s answer: this process changed what it was read from."""
        with self._lock:
            self._kept.pop(key, None)


def _ttl(seconds: float, size: int) -> Any:
    return field(default_factory=lambda: TtlCache(seconds, size))


@dataclass
class Caches:
    """Every short-lived answer of one process (one ``Services``)."""

    principals: TtlCache[str, Principal | None] = _ttl(PRINCIPAL_SECONDS, PRINCIPALS_KEPT)
    tenant_overrides: TtlCache[str, dict[str, Any]] = _ttl(OVERRIDES_SECONDS, OVERRIDES_KEPT)
    free_space: TtlCache[Path, float] = _ttl(FREE_SPACE_SECONDS, 64)
    forecast: TtlCache[None, tuple[Any, Any]] = _ttl(FORECAST_SECONDS, 1)  # (its stamp, eta.Stored)

    @classmethod
    def on_clock(cls, clock: Clock) -> Caches:
        """Caches that read ``clock`` (a test's) instead of ``time.monotonic``."""
        caches = cls()
        for cache in (caches.principals, caches.tenant_overrides, caches.free_space, caches.forecast):
            cache.clock = clock
        return caches
