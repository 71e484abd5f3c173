"""This process's own metrics (the API's HTTP requests) and prometheus-client's multiprocess mode.

Under gunicorn each worker process counts its own requests; with ``PROMETHEUS_MULTIPROC_DIR`` set,
prometheus-client writes those counts to files in that folder and any worker answering a scrape
sums every process's files. The folder must be chosen before prometheus-client creates a metric
(``prepare_multiprocess``, called by ``jobservice api`` before it loads the app) and emptied when
the server starts; a worker that exits is marked dead so its live gauges go (its counts stay).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client import values as prometheus_values
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector, Metric

ENV = "PROMETHEUS_MULTIPROC_DIR"
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
# name -> (type, labels): the families this process exports.
HTTP_FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "jobservice_http_requests": ("counter", ("method", "route", "status")),
    "jobservice_http_request_duration_seconds": ("histogram", ("method", "route")),
}

disable_created_metrics()  # no *_created series: multiprocess mode has none either
_local = CollectorRegistry(auto_describe=True)
_lock = threading.Lock()
_http: tuple[Counter, Histogram] | None = None
_series: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}  # (method, route, status): its series


def prepare_multiprocess(folder: Path | None = None) -> Path:
    """Point prometheus-client at an empty folder shared by this server's processes; return it.

    Without ``folder`` (and without ``PROMETHEUS_MULTIPROC_DIR`` already set) a fresh temporary
    folder is made and removed at exit. A folder that is given is emptied of earlier runs' files."""
    given = folder or (Path(os.environ[ENV]) if os.environ.get(ENV) else None)
    if given is None:
        path = Path(tempfile.mkdtemp(prefix="jobservice-metrics-"))
        atexit.register(_remove, path, os.getpid())
    else:
        path = given
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink()
    os.environ[ENV] = str(path)
    # prometheus-client picks its value class when first imported; choose again in case it was.
    prometheus_values.ValueClass = prometheus_values.get_value_class()
    return path


def _remove(path: Path, owner: int) -> None:
    # gunicorn's workers are forks that run atexit too: only the server that made it removes it.
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def process_exited(pid: int) -> None:
    """gunicorn's child_exit hook: drop the live gauges of a worker process that ended."""
    if os.environ.get(ENV):
        mark_process_dead(pid)


def http_metrics() -> tuple[Counter, Histogram]:
    """The HTTP request counter and latency histogram of this process (made on first use)."""
    global _http
    with _lock:
        if _http is None:
            counter = Counter(
                "jobservice_http_requests",
                "HTTP requests answered, by method, route (the URL rule) and status.",
                list(HTTP_FAMILIES["jobservice_http_requests"][1]),
                registry=_local,
            )
            histogram = Histogram(
                "jobservice_http_request_duration_seconds",
                "Time to answer a request (until the response starts), by method and route.",
                list(HTTP_FAMILIES["jobservice_http_request_duration_seconds"][1]),
                buckets=HTTP_BUCKETS,
                registry=_local,
            )
            _http = (counter, histogram)
        return _http


def observe_request(method: str, route: str, status: int, started: float | None) -> None:
    """Count one answered request and, when its start is known (``time.perf_counter()``), its time."""
    series = _series.get((method, route, status))
    if series is None:  # prometheus-client's own lookup validates the labels each time: once here
        requests, latency = http_metrics()
        series = _series[(method, route, status)] = (
            requests.labels(method, route, str(status)),
            latency.labels(method, route),
        )
    series[0].inc()
    if started is not None:
        series[1].observe(time.perf_counter() - started)


class _Local(Collector):
    def collect(self) -> Iterable[Metric]:
        return _local.collect()


def exposition(*collectors: Collector) -> tuple[bytes, str]:
    """The text format of this server's process metrics (summed over processes) plus ``collectors``."""
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get(ENV):
        MultiProcessCollector(registry)
    else:
        registry.register(_Local())
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry), CONTENT_TYPE_PLAIN_0_0_4  # what Prometheus 2 and 3 both read
