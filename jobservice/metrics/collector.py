"""The job, queue and fleet metrics as a Prometheus collector (read from the database per scrape).

Every number here is global: any API process, on any host, answers the same totals. Dashboards
therefore take ``max`` over instances for these families, never ``sum`` (see deploy/grafana).
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError

from jobservice.db.tables import utcnow
from jobservice.fleet.presence import stale_after
from jobservice.metrics import counters, live
from jobservice.metrics.counters import Totals
from jobservice.wiring import Services

log = logging.getLogger(__name__)

P = "jobservice_"
# name -> (type, help, labels): what this collector exports; the HTTP families are in HTTP_FAMILIES.
FAMILIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    P + "jobs_submitted": (
        "counter",
        "Jobs created, by model and source (api, web, batch ...).",
        ("model", "source"),
    ),
    P + "jobs_finished": (
        "counter",
        "Jobs that reached succeeded, failed or canceled, by model, status and error code.",
        ("model", "status", "error_code"),
    ),
    P + "jobs_validated": (
        "counter",
        "Finished jobs whose output went through the gate.",
        ("model", "verdict"),
    ),
    P + "qc_failures": (
        "counter",
        "Failed output-gate checks of finished jobs, by check.",
        ("model", "check"),
    ),
    P + "job_stage_seconds": (
        "histogram",
        "Stage durations of finished jobs (queue_wait, fetch, load, generate, encode, validate, upload, "
        "total on the worker; end_to_end from creation to finish).",
        ("model", "stage"),
    ),
    P + "jobs_counted_until_seconds": ("gauge", "Unix time up to which finished jobs are counted.", ()),
    P + "queue_depth": ("gauge", "Jobs queued now.", ("model",)),
    P + "queue_oldest_age_seconds": ("gauge", "Age of the oldest queued job (0 if none).", ("model",)),
    P + "jobs_running": ("gauge", "Jobs running now.", ("model",)),
    P + "workers_online": ("gauge", "Worker processes online, by card group.", ("devices", "kind")),
    P + "model_workers_online": ("gauge", "Online workers serving each model.", ("model",)),
    P + "card_memory_total_bytes": (
        "gauge",
        "Memory of each card an online worker owns (as the worker last read it; every minute).",
        ("hostname", "devices", "card", "name"),
    ),
    P + "card_memory_used_bytes": (
        "gauge",
        "Used memory of each card an online worker owns (as the worker last read it; every minute).",
        ("hostname", "devices", "card", "name"),
    ),
    P + "metrics_database_up": ("gauge", "1 if this scrape could read the database.", ()),
    P + "metrics_database_seconds": ("gauge", "Time this scrape spent reading the database.", ()),
}


class JobsCollector(Collector):
    """Reads and advances the database-derived metrics on every collect()."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def describe(self) -> Iterable[Metric]:
        """Nothing: the registry must not call collect() (and touch the database) at registration."""
        return []

    def collect(self) -> Iterable[Metric]:
        """Every family in FAMILIES, from one pass over the database."""
        started = time.perf_counter()
        try:
            families = list(self._families())
            up = 1.0
        except SQLAlchemyError:
            log.warning("metrics: the database could not be read", exc_info=True)
            families, up = [], 0.0
        yield from families
        yield _gauge(P + "metrics_database_up", [((), up)])
        yield _gauge(P + "metrics_database_seconds", [((), time.perf_counter() - started)])

    def _families(self) -> Iterator[Metric]:
        settings, db = self.services.settings, self.services.db
        until = utcnow() - timedelta(seconds=settings.metrics_settle_seconds)
        try:
            with db.session() as session:
                totals = counters.advance(session, until=until)
        except SQLAlchemyError as exc:  # another process holds the lock, or raced to create the mark
            log.info("metrics: counters not advanced this scrape (%s)", type(exc).__name__)
            with db.session() as session:
                totals = counters.read_totals(session)
        now = utcnow()
        with db.session() as session:
            queues = live.queues(session, models=self.services.catalog.ids(), now=now)
            fleet = live.fleet(session, stale_after_seconds=stale_after(settings), now=now)
        yield from _counter_families(totals)
        yield _gauge(P + "jobs_counted_until_seconds", [((), totals.counted_until.timestamp())])
        yield from _queue_families(queues)
        yield from _fleet_families(fleet)


def _labels(key: str) -> dict[str, str]:
    value: dict[str, str] = json.loads(key)
    return value


def _counter_families(totals: Totals) -> Iterator[Metric]:
    by_name: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for (name, key), value in sorted(totals.rows.items()):
        by_name[name].append((_labels(key), value))
    for name in (counters.SUBMITTED, counters.FINISHED, counters.VALIDATED, counters.QC_FAILURES):
        family = P + name
        labels = FAMILIES[family][2]
        metric = CounterMetricFamily(family, FAMILIES[family][1], labels=labels)
        for values, value in by_name[name]:
            metric.add_metric([values.get(label, "") for label in labels], value)
        yield metric
    yield _histogram(by_name)


def _histogram(by_name: dict[str, list[tuple[dict[str, str], float]]]) -> Metric:
    family = P + counters.STAGE_SECONDS
    metric = HistogramMetricFamily(family, FAMILIES[family][1], labels=FAMILIES[family][2])
    buckets: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for values, value in by_name[counters.STAGE_SECONDS + "_bucket"]:
        buckets[(values["model"], values["stage"])][values["le"]] = value
    sums = {(v["model"], v["stage"]): value for v, value in by_name[counters.STAGE_SECONDS + "_sum"]}
    for series, found in sorted(buckets.items()):
        cumulative: list[tuple[str, float]] = []
        for bound in counters.BUCKETS:  # a bucket below every observation was never written: 0
            le = counters.le_text(bound)
            cumulative.append((le, found.get(le, 0.0)))
        metric.add_metric(list(series), cumulative, sums.get(series, 0.0))
    return metric


def _queue_families(queues: dict[str, live.ModelQueue]) -> Iterator[Metric]:
    items = sorted(queues.items())
    yield _gauge(P + "queue_depth", [((m,), q.queued) for m, q in items])
    yield _gauge(P + "queue_oldest_age_seconds", [((m,), q.oldest_queued_seconds) for m, q in items])
    yield _gauge(P + "jobs_running", [((m,), q.running) for m, q in items])


def _fleet_families(fleet: live.Fleet) -> Iterator[Metric]:
    yield _gauge(P + "workers_online", sorted(fleet.by_group.items()))
    yield _gauge(P + "model_workers_online", [((m,), n) for m, n in sorted(fleet.by_model.items())])
    for family, attribute in (
        ("card_memory_total_bytes", "total_bytes"),
        ("card_memory_used_bytes", "used_bytes"),
    ):
        samples = [
            ((c.hostname, c.devices, c.card, c.name), getattr(c, attribute))
            for c in fleet.cards
            if getattr(c, attribute) is not None
        ]
        yield _gauge(P + family, samples)


def _gauge(family: str, samples: Iterable[tuple[tuple[str, ...], Any]]) -> Metric:
    kind, help_text, labels = FAMILIES[family]
    assert kind == "gauge"
    metric = GaugeMetricFamily(family, help_text, labels=labels)
    for values, value in samples:
        metric.add_metric(list(values), float(value))
    return metric
