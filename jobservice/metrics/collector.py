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
    P + "queue_output_seconds": (
        "gauge",
        "Seconds of video the queued jobs of a model will make (what an autoscaler weighs: one 10-minute "
        "talking head is not one 5-second clip).",
        ("model",),
    ),
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
    P + "card_seconds": (
        "counter",
        "Card-seconds of every card group in each ledger state (generating, loading, finishing, idle_warm, "
        "idle_empty, unhealthy, down), by the model it concerned; a group's states sum to its cards times "
        "wall time. A retired group's series are gone.",
        ("group", "state", "model"),
    ),
    P + "model_loads": (
        "counter",
        "Cold loads of a model on a card group, by why.",
        ("model", "group", "reason"),
    ),
    P + "model_load_seconds": ("histogram", "How long cold loads took.", ("model",)),
    P + "model_evictions": (
        "counter",
        "Models unloaded from a card group, by why (to make room for another, worker lost ...).",
        ("model", "group", "reason"),
    ),
    P + "model_age_at_eviction_seconds": (
        "histogram",
        "How long an evicted model had been resident.",
        ("model",),
    ),
    P + "tenant_card_seconds": (
        "counter",
        "Card-seconds charged to a tenant (every attempt's load, generation and finishing, times its cards).",
        ("tenant", "model"),
    ),
    P + "wasted_card_seconds": (
        "counter",
        "Card-seconds the service lost on its own faults (worker lost, lease lost), never charged.",
        ("model", "outcome"),
    ),
    P + "group_resident": ("gauge", "1 for each model a card group holds now.", ("group", "model")),
    P + "group_state": ("gauge", "1 for the ledger state each card group is in now.", ("group", "state")),
    P + "group_accepting": (
        "gauge",
        "1 while a card group may be given jobs; 0 while it is down, drains (its worker was asked to "
        "stop) or has a card that is not healthy.",
        ("group",),
    ),
    P + "group_memory_used_ratio": (
        "gauge",
        "Memory of a card group's first card held by its resident models, over what the card has.",
        ("group",),
    ),
    P + "group_info": (
        "gauge",
        "1 for each card group, with the host and (on Kubernetes) the pod its worker runs in: join the "
        "DCGM or NPU exporter's per-pod metrics to groups on these labels.",
        ("group", "hostname", "pod"),
    ),
    P + "webhook_backlog": ("gauge", "Webhook deliveries not yet delivered nor given up.", ()),
    P + "webhook_backlog_oldest_seconds": (
        "gauge",
        "Age of the oldest webhook delivery not yet delivered nor given up (0 if none).",
        (),
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
            unfolded = counters.open_card_seconds(session, counted_until=totals.counted_until, now=now)
            groups = live.groups(session, self.services.catalog)
            webhooks = live.webhook_backlog(session, now=now)
            retired = live.retired_groups(session)
        yield from _counter_families(totals, unfolded, retired=retired)
        yield _gauge(P + "jobs_counted_until_seconds", [((), totals.counted_until.timestamp())])
        yield from _queue_families(queues)
        yield from _fleet_families(fleet)
        yield _gauge(P + "group_resident", [((g.id, m), 1) for g in groups for m in g.resident])
        yield _gauge(P + "group_state", [((g.id, g.state), 1) for g in groups])
        yield _gauge(P + "group_info", [((g.id, g.hostname, g.pod), 1) for g in groups])
        yield _gauge(P + "webhook_backlog", [((), webhooks.pending)])
        yield _gauge(P + "webhook_backlog_oldest_seconds", [((), webhooks.oldest_seconds)])
        yield _gauge(P + "group_accepting", [((g.id,), 1 if g.accepting else 0) for g in groups])
        yield _gauge(
            P + "group_memory_used_ratio",
            [((g.id,), g.memory_ratio) for g in groups if g.memory_ratio is not None],
        )


def _labels(key: str) -> dict[str, str]:
    value: dict[str, str] = json.loads(key)
    return value


COUNTERS = (
    counters.SUBMITTED,
    counters.FINISHED,
    counters.VALIDATED,
    counters.QC_FAILURES,
    counters.MODEL_LOADS,
    counters.MODEL_EVICTIONS,
    counters.TENANT_CARD_SECONDS,
    counters.WASTED_CARD_SECONDS,
)
HISTOGRAMS = (counters.STAGE_SECONDS, counters.MODEL_LOAD_SECONDS, counters.MODEL_AGE_AT_EVICTION)


def _counter_families(
    totals: Totals, unfolded: dict[tuple[str, str, str], float], *, retired: frozenset[str] = frozenset()
) -> Iterator[Metric]:
    """The counters and histograms; a retired card group's series are left out."""
    by_name: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for (name, key), value in sorted(totals.rows.items()):
        values = _labels(key)
        if values.get("group") in retired:
            continue
        by_name[name].append((values, value))
    unfolded = {key: value for key, value in unfolded.items() if key[0] not in retired}
    for name in COUNTERS:
        family = P + name
        labels = FAMILIES[family][2]
        metric = CounterMetricFamily(family, FAMILIES[family][1], labels=labels)
        for values, value in by_name[name]:
            metric.add_metric([values.get(label, "") for label in labels], value)
        yield metric
    yield _card_seconds(by_name[counters.CARD_SECONDS], unfolded)
    for name in HISTOGRAMS:
        yield _histogram(name, by_name)


def _card_seconds(
    folded: list[tuple[dict[str, str], float]], unfolded: dict[tuple[str, str, str], float]
) -> Metric:
    """The ledger's counter: closed spans folded in, plus what the spans not folded yet hold so far."""
    family = P + counters.CARD_SECONDS
    totals = dict(unfolded)
    for values, value in folded:
        key = (values.get("group", ""), values.get("state", ""), values.get("model", ""))
        totals[key] = totals.get(key, 0.0) + value
    metric = CounterMetricFamily(family, FAMILIES[family][1], labels=FAMILIES[family][2])
    for key, value in sorted(totals.items()):
        metric.add_metric(list(key), value)
    return metric


def _histogram(name: str, by_name: dict[str, list[tuple[dict[str, str], float]]]) -> Metric:
    family = P + name
    labels = FAMILIES[family][2]
    metric = HistogramMetricFamily(family, FAMILIES[family][1], labels=labels)
    buckets: dict[tuple[str, ...], dict[str, float]] = defaultdict(dict)
    for values, value in by_name[name + "_bucket"]:
        buckets[tuple(values.get(label, "") for label in labels)][values["le"]] = value
    sums = {tuple(v.get(label, "") for label in labels): value for v, value in by_name[name + "_sum"]}
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
    yield _gauge(P + "queue_output_seconds", [((m,), q.output_seconds) for m, q in items])
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
