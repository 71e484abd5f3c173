"""Counters derived from the jobs table, advanced incrementally at scrape time.

A finished job's row is the truth: whoever finished it (the worker, the reaper in another worker,
the API cancelling a queued job), its status, error code, timings and failed checks are there. So
the job metrics come from the table, not from counters in the processes that ran the jobs. The
fleet's come the same way from its tables: the ledger's closed spans (card-seconds per group, state
and model), its loads and evictions, and the attempts' recorded usage (card-seconds per tenant).

To stay cheap on a large table, nothing here groups the whole table: ``job_counter_marks`` says up
to when jobs have been counted, and each advance adds only the jobs created or finished in
``(mark, until]`` (index ranges on ``created_at`` and ``finished_at``) to the totals kept in
``job_counters``. ``until`` lags the clock by ``metrics_settle_seconds`` so that a row whose
transaction commits a little after its timestamp was taken is still counted.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select, update
from sqlalchemy.orm import Session

from jobservice.db.tables import FleetEvent, Job, JobCounter, JobCounterMark, JobUsage, LedgerSpan

MARK = "jobs"
SUBMITTED = "jobs_submitted"  # labels: model, source
FINISHED = "jobs_finished"  # labels: model, status, error_code
VALIDATED = "jobs_validated"  # labels: model, verdict
QC_FAILURES = "qc_failures"  # labels: model, check
STAGE_SECONDS = "job_stage_seconds"  # a histogram; labels: model, stage (+ le on its buckets)
CARD_SECONDS = "card_seconds"  # labels: group, state, model (the ledger's closed spans x cards)
MODEL_LOADS = "model_loads"  # labels: model, group, reason
MODEL_LOAD_SECONDS = "model_load_seconds"  # a histogram; labels: model
MODEL_EVICTIONS = "model_evictions"  # labels: model, group, reason
MODEL_AGE_AT_EVICTION = "model_age_at_eviction_seconds"  # a histogram; labels: model
TENANT_CARD_SECONDS = "tenant_card_seconds"  # labels: tenant, model (charged attempts)
WASTED_CARD_SECONDS = "wasted_card_seconds"  # labels: model, outcome (worker_lost, lease_lost)

# Stages as the jobs table's ``timings`` names them (``<stage>_ms``); ``end_to_end`` is
# created -> finished, as a client sees it.
STAGES = ("queue_wait", "fetch", "load", "generate", "encode", "validate", "upload", "total")
END_TO_END = "end_to_end"
BUCKETS = (
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
    math.inf,
)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# One advance counts at most this much time, so a scrape after a long pause stays short (~56 us a job
# measured on PostgreSQL); the next scrapes catch up.
MAX_WINDOW = timedelta(hours=1)


def label_key(labels: dict[str, str]) -> str:
    """The stored form of a label set: canonical JSON."""
    return json.dumps(labels, sort_keys=True, separators=(",", ":"))


def le_text(bound: float) -> str:
    """A bucket bound as Prometheus writes it."""
    return "+Inf" if math.isinf(bound) else repr(float(bound))


Labels = tuple[tuple[str, str], ...]


@dataclass
class Tally:
    """Increments collected from one window: counters, and histograms as per-bucket counts."""

    counts: dict[tuple[str, Labels], float] = field(default_factory=lambda: defaultdict(float))
    histograms: dict[tuple[str, Labels], list[float]] = field(default_factory=dict)
    jobs: int = 0

    def add(self, name: str, labels: dict[str, str], amount: float = 1.0) -> None:
        """Add ``amount`` to a counter."""
        self.counts[(name, tuple(sorted(labels.items())))] += amount

    def observe(self, name: str, labels: dict[str, str], seconds: float) -> None:
        """Record one observation: its bucket, the sum (second to last) and the count (last)."""
        key = (name, tuple(sorted(labels.items())))
        series = self.histograms.get(key)
        if series is None:
            series = self.histograms[key] = [0.0] * (len(BUCKETS) + 2)
        series[bisect_left(BUCKETS, seconds)] += 1
        series[-2] += seconds
        series[-1] += 1

    def increments(self) -> dict[tuple[str, str], float]:
        """Every increment keyed by stored (name, label key); histograms as cumulative buckets."""
        out = {(name, label_key(dict(labels))): value for (name, labels), value in self.counts.items()}
        for (name, labels), series in self.histograms.items():
            running = 0.0
            for bound, count in zip(BUCKETS, series, strict=False):
                running += count
                if running:
                    out[(f"{name}_bucket", label_key({**dict(labels), "le": le_text(bound)}))] = running
            out[(f"{name}_sum", label_key(dict(labels)))] = series[-2]
            out[(f"{name}_count", label_key(dict(labels)))] = series[-1]
        return out


@dataclass(frozen=True)
class Totals:
    """What the counters hold after an advance, and up to when they count."""

    rows: dict[tuple[str, str], float]
    counted_until: datetime
    advanced_jobs: int


def count_window(session: Session, since: datetime, until: datetime) -> Tally:
    """The increments for jobs created or finished in ``(since, until]``."""
    tally = Tally()
    created = (
        select(Job.model, Job.source, func.count())
        .where(Job.created_at > since, Job.created_at <= until)
        .group_by(Job.model, Job.source)
    )
    for model, source, count in session.execute(created):
        tally.add(SUBMITTED, {"model": model, "source": source or ""}, float(count))
    finished = select(
        Job.model,
        Job.status,
        Job.error_code,
        Job.verdict,
        Job.timings,
        Job.validation_summary,
        Job.created_at,
        Job.finished_at,
    ).where(Job.finished_at > since, Job.finished_at <= until)
    for row in session.execute(finished.execution_options(yield_per=1000)):
        tally.jobs += 1
        _count_finished(tally, *row)
    _count_fleet(session, tally, since, until)
    return tally


def _count_fleet(session: Session, tally: Tally, since: datetime, until: datetime) -> None:
    """The ledger's spans that closed, the loads and evictions, and the usage recorded, in the window."""
    for (group, state, model), seconds in _span_card_seconds(
        session, and_(LedgerSpan.ended_at > since, LedgerSpan.ended_at <= until), now=until
    ).items():
        tally.add(CARD_SECONDS, {"group": group, "state": state, "model": model}, seconds)
    events = select(
        FleetEvent.group_id, FleetEvent.kind, FleetEvent.model, FleetEvent.reason, FleetEvent.seconds
    ).where(FleetEvent.at > since, FleetEvent.at <= until)
    for group, kind, model, reason, took in session.execute(events):
        labels = {"model": model, "group": group, "reason": reason}
        if kind == "load":
            tally.add(MODEL_LOADS, labels)
            tally.observe(MODEL_LOAD_SECONDS, {"model": model}, float(took or 0.0))
        elif kind == "evict":
            tally.add(MODEL_EVICTIONS, labels)
            tally.observe(MODEL_AGE_AT_EVICTION, {"model": model}, float(took or 0.0))
    usage = select(
        JobUsage.tenant, JobUsage.model, JobUsage.outcome, JobUsage.charged, JobUsage.card_seconds
    ).where(JobUsage.recorded_at > since, JobUsage.recorded_at <= until)
    for tenant, model, outcome, charged, card_seconds in session.execute(usage):
        if charged:
            tally.add(TENANT_CARD_SECONDS, {"tenant": tenant, "model": model}, card_seconds)
        else:
            tally.add(WASTED_CARD_SECONDS, {"model": model, "outcome": outcome}, card_seconds)


def open_card_seconds(
    session: Session, *, counted_until: datetime, now: datetime
) -> dict[tuple[str, str, str], float]:
    """Card-seconds of the spans not folded into the counters yet (still open, or closed after
    ``counted_until``), by (group, state, model): added at scrape time, so the counter grows while a
    group stays in one state, and never steps back when its span closes and is folded."""
    unfolded = or_(LedgerSpan.ended_at.is_(None), LedgerSpan.ended_at > counted_until)
    return _span_card_seconds(session, unfolded, now=now)


def _span_card_seconds(
    session: Session, condition: ColumnElement[bool], *, now: datetime
) -> dict[tuple[str, str, str], float]:
    """Card-seconds of the ledger spans matching ``condition`` (an open one counted up to ``now``),
    by (group, state, model)."""
    columns = (LedgerSpan.group_id, LedgerSpan.state, LedgerSpan.model, LedgerSpan.cards)
    found: dict[tuple[str, str, str], float] = {}
    for group, state, model, cards, started, ended in session.execute(
        select(*columns, LedgerSpan.started_at, LedgerSpan.ended_at).where(condition)
    ):
        seconds = max(0.0, (min(ended or now, now) - started).total_seconds()) * (cards or 1)
        key = (group, state, model or "")
        found[key] = found.get(key, 0.0) + seconds
    return found


def _count_finished(
    tally: Tally,
    model: str,
    status: Any,
    error_code: str | None,
    verdict: str | None,
    timings: dict[str, Any] | None,
    summary: dict[str, Any] | None,
    created_at: datetime,
    finished_at: datetime,
) -> None:
    tally.add(FINISHED, {"model": model, "status": str(status), "error_code": error_code or ""})
    if verdict:
        tally.add(VALIDATED, {"model": model, "verdict": verdict})
    for check in (summary or {}).get("failed_checks") or []:
        tally.add(QC_FAILURES, {"model": model, "check": str(check)})
    for stage in STAGES:
        value = (timings or {}).get(f"{stage}_ms")
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            tally.observe(STAGE_SECONDS, {"model": model, "stage": stage}, value / 1000)
    tally.observe(
        STAGE_SECONDS,
        {"model": model, "stage": END_TO_END},
        max(0.0, (finished_at - created_at).total_seconds()),
    )


def advance(session: Session, *, until: datetime) -> Totals:
    """Add the jobs of ``(mark, until]`` to the counters and move the mark; return every total.

    The first statement locks the mark row (PostgreSQL row lock, SQLite's write lock), so two API
    processes scraping at once take turns and never count a job twice."""
    session.execute(
        update(JobCounterMark)
        .where(JobCounterMark.name == MARK)
        .values(counted_until=JobCounterMark.counted_until)
    )
    mark = session.get(JobCounterMark, MARK)
    if mark is None:  # a database built without the migration: count from the beginning
        mark = JobCounterMark(name=MARK, counted_until=EPOCH)
        session.add(mark)
        session.flush()
    rows = {(c.name, c.labels): c for c in session.scalars(select(JobCounter))}
    jobs = 0
    if mark.counted_until > EPOCH:  # after a long pause, catch up an hour per scrape
        until = min(until, mark.counted_until + MAX_WINDOW)
    if until > mark.counted_until:
        tally = count_window(session, mark.counted_until, until)
        jobs = tally.jobs
        for key, amount in tally.increments().items():
            row = rows.get(key)
            if row is None:
                rows[key] = row = JobCounter(name=key[0], labels=key[1], value=0.0)
                session.add(row)
            row.value += amount
        mark.counted_until = until
    return Totals(
        rows={key: row.value for key, row in rows.items()},
        counted_until=mark.counted_until,
        advanced_jobs=jobs,
    )


def read_totals(session: Session) -> Totals:
    """Every total as it stands, without advancing (when another process holds the lock)."""
    mark = session.get(JobCounterMark, MARK)
    rows = {(c.name, c.labels): c.value for c in session.scalars(select(JobCounter))}
    return Totals(rows=rows, counted_until=mark.counted_until if mark else EPOCH, advanced_jobs=0)
