"""Writes to the object store, retried with backoff while the failure looks transient.

A store that blinks (S3 restarting, a 503, a dropped connection, an I/O error on a network disk)
must not cost a finished video. A full store (``StoreFull``) or a refusal (bad credentials, a
read-only folder) is not retried: waiting would not help.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from jobservice.storage.base import StoreUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_DELAYS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)
"""Pauses between attempts (about 8 s in all); a module constant so tests can shrink it."""


def retrying(operation: Callable[[], T], *, what: str, delays: tuple[float, ...] | None = None) -> T:
    """Run ``operation``; on a transient StoreUnavailable wait and try again, at most len(delays) times."""
    pauses = RETRY_DELAYS if delays is None else delays
    for attempt, pause in enumerate((*pauses, None), start=1):
        try:
            return operation()
        except StoreUnavailable as exc:
            if not exc.transient or pause is None:
                raise
            wait = pause * random.uniform(0.8, 1.2)  # noqa: S311 - jitter, not security
            log.warning("%s failed on attempt %d (%s); retrying in %.1f s", what, attempt, exc, wait)
            time.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover
