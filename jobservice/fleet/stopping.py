"""How long a card group's worker needs to stop without losing the job it runs.

A worker asked to stop takes no new job and lets the one it runs end: its generation, then its
finishing (encoder flush, gate, upload, record), all within the job's own limit (the heartbeat's
deadline covers the finishing too, ``workers/run/heartbeat.py``). So the worst stop is a job that
started just before it, run to its model's timeout, plus a margin for the ending (a timeout's
report, the models' unload, Celery's own shutdown). Every unit that stops a worker (the Kubernetes
StatefulSets the kit generates, the compose files, the systemd unit) must give at least
``stop_grace_seconds``; the worker's own wait for its finishing job is ``drain_seconds``. Both follow
the deployment file: tests/unit/test_stop_grace.py checks every unit against it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from jobservice.catalog import Catalog

STOP_MARGIN_SECONDS = 120  # past the longest job's limit: its ending, the unload, Celery's shutdown
DRAIN_MARGIN_SECONDS = 60  # the worker waits this long past a job's limit for its finishing to end


def drain_seconds(catalog: Catalog, models: Iterable[str] | None, *, job_timeout_seconds: float) -> float:
    """How long a stopping worker serving ``models`` (None: every model) waits for the job it is
    finishing: that job cannot outlive its limit, so the longest limit and a little more."""
    return catalog.longest_timeout(models, default=job_timeout_seconds) + DRAIN_MARGIN_SECONDS


def stop_grace_seconds(catalog: Catalog, models: Iterable[str] | None, *, job_timeout_seconds: float) -> int:
    """Whole seconds a unit must let a worker serving ``models`` (None: every model) take to stop:
    a job started just before the stop, run to its limit, and its ending."""
    longest = catalog.longest_timeout(models, default=job_timeout_seconds)
    return math.ceil(longest + STOP_MARGIN_SECONDS)
