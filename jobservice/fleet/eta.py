"""ETAs in the service: the forecast (``jobservice.fleet.forecast``) worked out from the database
every few seconds, stored, and read by every view of a queued or running job.

Whoever finds the stored forecast older than ``forecast_interval_seconds`` takes it over (a
compare-and-swap on its timestamp, so one process at a time computes it: every worker's maintenance
round tries) and replaces it. A submission of many jobs at once (a batch) replaces it at once, so
those jobs' first answers already have their ETAs. The forecast plays the fleet forward with the
production policy from the state the dispatcher reads: groups busy until their jobs should end, the
queue in fair order, each model's measured speed and load time, and the batch jobs (and bunches of
interactive jobs) that arrived a day ago over the next hours, expected again (``forecast.recurring``).

A job's ETA is honest about what it cannot know: no online group may run its model (``no_group``),
or its model was never measured and its deployment gives no default (``not_measured``: the ETA is
then a guess from a default speed, and says so).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Connection, func, literal, select, tuple_, update
from sqlalchemy.orm import Session

from jobservice.catalog import Catalog
from jobservice.db.engine import Database
from jobservice.db.rows import insert_missing, update_one
from jobservice.db.tables import FleetForecast, Job, JobStatus, utcnow
from jobservice.fleet import shares
from jobservice.fleet.dispatch import Snapshot, read_state
from jobservice.fleet.forecast import (
    AHEAD,
    DAY,
    FRESH,
    REVISIONS_KEPT,
    SINGLES_BEFORE_REFRESH,
    SLACK,
    Forecast,
    Queued,
    behind_counts,
    forecast,
    late_start,
    recurring,
    revise,
    trickle_ends,
    usage_levels,
)
from jobservice.fleet.policy import INTERACTIVE, can_host
from jobservice.fleet.simulate import Engine, SimJob
from jobservice.fleet.usage import weights
from jobservice.settings import Settings

if TYPE_CHECKING:
    from jobservice.caches import Caches


class WithCaches(Protocol):
    """What ``latest`` reads of ``Services`` (the fleet package does not import ``wiring``)."""

    db: Database
    caches: Caches


log = logging.getLogger(__name__)

HORIZON = 2000  # jobs played one by one; the rest of each sub-queue is extrapolated
HISTORY_ROWS = 50_000  # at most this many jobs of each span of history are read to expect again
SPREAD = 10.0  # a forecast's cost is at most a tenth of one process's time
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Eta:
    """When a job should start and finish, on what the estimate rests, its place in the dispatcher's
    order, what the forecast assumed, and the tenant's share of the cards it counted on."""

    start: datetime | None
    finish: datetime | None
    basis: str  # forecast | no_group | not_measured | unknown
    position: int | None = None  # the jobs the dispatcher starts before it (a queued job)
    assumes: dict[str, Any] | None = None
    share: dict[str, Any] | None = None

    def view(self) -> dict[str, Any]:
        """The fields a job's view carries."""
        return {
            "estimated_start_at": self.start,
            "estimated_finish_at": self.finish,
            "eta_basis": self.basis,
            "eta_assumes": self.assumes,
            "fair_share": self.share,
        }


# --- building the forecast -------------------------------------------------------------------------
def _engine(session: Session, snapshot: Snapshot, settings: Settings, catalog: Catalog) -> Engine:
    """The fleet as it is now, as a virtual-time engine (the simulator the benchmark drives)."""
    state = snapshot.state
    now = state.now
    engine = Engine(
        groups=state.groups,
        models=state.models,
        params=state.params,
        half_life_s=settings.fair_share_half_life_seconds,
        weights=weights(session),
        now=now,
    )
    # Charged card-seconds; the jobs on the cards are adopted below and counted by the engine itself.
    half_life_s = settings.fair_share_half_life_seconds
    for tenant, value in shares.charged(session, half_life_s=half_life_s, now=utcnow()).items():
        engine.charge(tenant, value, now)
    engine.activated.update(shares.activations(session))
    engine.newcomer_credit_s = settings.fair_share_newcomer_credit_seconds
    level = shares.floor(session, half_life_s=half_life_s, now=utcnow())
    if level is not None:
        engine.note_floor({"": level}, tenants=[""])
    running = session.execute(
        select(
            Job.id, Job.model, Job.tenant, Job.priority, Job.output_seconds, Job.dispatched_to, Job.claimed_at
        ).where(
            Job.dispatched_to.is_not(None),
            Job.status.in_([JobStatus.RUNNING, JobStatus.QUEUED]),
            Job.dispatched_to.in_(list(snapshot.groups)),
        )
    )
    for row in running:
        group = engine.groups.get(row.dispatched_to)
        if group is None or group.busy_until is None or row.dispatched_to in engine.running:
            continue
        job = SimJob(str(row.id), row.model, row.tenant, row.priority, float(row.output_seconds or 0.0), now)
        job.group, job.dispatched = row.dispatched_to, now
        job.started = (
            now
            if row.claimed_at is not None
            else group.busy_until - state.models[row.model].run_s(job.output_s)
        )
        job.finished = group.busy_until
        engine.adopt(job)
    queued = session.execute(
        select(Job.id, Job.model, Job.tenant, Job.priority, Job.output_seconds, Job.created_at)
        .where(Job.status == JobStatus.QUEUED, Job.dispatched_to.is_(None), Job.cancel_requested_at.is_(None))
        .order_by(Job.created_at, Job.id)
    )
    for waiting in queued:
        if waiting.model in state.models:
            seconds = float(waiting.output_seconds or 0.0)
            submitted = waiting.created_at.timestamp()
            engine.submit(
                SimJob(str(waiting.id), waiting.model, waiting.tenant, waiting.priority, seconds, submitted),
                arriving=False,
            )
    # The arrivals it expects are the dispatcher's: the rates of every job submitted lately, and
    # each such model's last job (the forecast expects one more like it; see forecast()).
    engine.held_rates = dict(state.rates)
    # The interactive arrivals of the rate window, so that the forecast sees a trickle end.
    for model, times in _interactive_arrivals(session, now, state.params.rate_window_s).items():
        engine.interactive_arrivals[model] = deque(times)
    since = datetime.fromtimestamp(now - state.params.rate_window_s, UTC)
    for model in sorted(m for m, r in state.rates.items() if r > 0 and m in state.models):
        last = session.execute(
            select(Job.id, Job.tenant, Job.priority, Job.output_seconds, Job.created_at)
            .where(Job.model == model, Job.created_at >= since)
            .order_by(Job.created_at.desc(), Job.id.desc())
            .limit(1)
        ).first()
        if last is not None:
            seconds = float(last.output_seconds or 0.0)
            engine.latest[model] = SimJob(
                str(last.id), model, last.tenant, last.priority, seconds, last.created_at.timestamp()
            )
    return engine


def _interactive_arrivals(session: Session, now: float, window_s: float) -> dict[str, list[float]]:
    """When each model's interactive jobs were submitted over the last ``window_s``."""
    since = datetime.fromtimestamp(now - window_s, UTC)
    rows = session.execute(
        select(Job.model, Job.created_at)
        .where(Job.created_at >= since, Job.priority == INTERACTIVE)
        .order_by(Job.created_at)
    )
    found: dict[str, list[float]] = {}
    for model, at in rows:
        found.setdefault(model, []).append(at.timestamp())
    return found


def _history(session: Session, engine: Engine, settings: Settings) -> list[SimJob]:
    """The jobs ``recurring`` learns from: those submitted a day ago (from ``SLACK`` before to
    ``AHEAD`` after) and in the last ``SLACK`` seconds, each span capped at ``HISTORY_ROWS``, batch
    jobs first (a day of interactive requests never crowds yesterday's batches out)."""
    if not settings.forecast_expects_yesterday:
        return []
    spans = ((engine.now - DAY - SLACK, engine.now - DAY + AHEAD), (engine.now - SLACK, engine.now))
    found: list[SimJob] = []
    for start, end in spans:
        rows = session.execute(
            select(Job.id, Job.model, Job.tenant, Job.priority, Job.output_seconds, Job.created_at)
            .where(Job.created_at > datetime.fromtimestamp(start, UTC))
            .where(Job.created_at <= datetime.fromtimestamp(end, UTC))
            .order_by(Job.priority.desc(), Job.created_at, Job.id)
            .limit(HISTORY_ROWS)
        )
        found.extend(
            SimJob(
                str(r.id),
                r.model,
                r.tenant,
                r.priority,
                float(r.output_seconds or 0.0),
                r.created_at.timestamp(),
            )
            for r in rows
            if r.model in engine.models
        )
    return found


@dataclass(frozen=True)
class Made:
    """A forecast just made: its stored form, and the queued jobs it placed (for revisions)."""

    body: dict[str, Any]
    queued: list[SimJob]


def compute(session: Session, catalog: Catalog, settings: Settings) -> dict[str, Any]:
    """The forecast now, as stored (JSON-ready)."""
    return _make(session, catalog, settings).body


def _make(session: Session, catalog: Catalog, settings: Settings) -> Made:
    snapshot = read_state(session, catalog, settings)
    engine = _engine(session, snapshot, settings, catalog)
    queued = [job for queue in engine.queues.values() for job in queue]
    tenants = usage_levels(engine.fair_usage())
    priorities = {0, settings.queue_batch_priority}
    history = _history(session, engine, settings)
    expected = recurring(history, engine.now, lowest=settings.queue_batch_priority, costs=engine.models)
    handed = {str(g.next_job_id): g.id for g in snapshot.groups.values() if g.next_job_id is not None}
    window = snapshot.state.params.rate_window_s
    trickles = trickle_ends(history, engine.now, window=window) if history else None
    result = forecast(
        engine,
        expected=expected,
        tenants=tenants,
        priorities=priorities,
        horizon=HORIZON,
        in_place=True,
        handed=handed,
        trickles=trickles,
    )
    servable = {
        m for m, c in snapshot.state.models.items() if any(can_host(g, c) for g in snapshot.state.groups)
    }
    body = {
        "at": result.at,
        "jobs": {job_id: [round(s, 2), round(f, 2)] for job_id, (s, f) in result.jobs.items()},
        "next_start": [[m, p, t, round(v, 2)] for (m, p, t), v in result.next_start.items()],
        "spacing": [[m, p, t, round(v, 2)] for (m, p, t), v in result.spacing.items()],
        "positions": dict(result.positions),
        "next_position": [[m, p, t, n] for (m, p, t), n in result.next_position.items()],
        "hosts": {m: list(h) for m, h in result.hosts.items()},
        "cards": dict(result.cards),
        "competing": [[p, t, w] for p, tenants_at in result.competing.items() for t, w in tenants_at.items()],
        "weights": dict(result.weights),
        "expected": result.expected,
        "no_group": sorted(set(catalog.ids()) - servable),
        "not_measured": sorted(m for m, k in snapshot.known.items() if not k.known),
        "run_s": {m: [round(c.overhead_s, 3), round(c.speed, 4)] for m, c in snapshot.state.models.items()},
    }
    return Made(body, queued)


def refresh(db: Database, catalog: Catalog, settings: Settings, *, force: bool = False) -> bool:
    """Replace the stored forecast if it is due (or ``force``, or at least ``SINGLES_BEFORE_REFRESH``
    jobs were submitted since it was made, one by one, and a second has passed); False when it was
    not this process's turn. Each queued job whose ETA moved by more than max(60 s, a fifth of its
    wait) since the one it showed gets a revision with its cause (``forecast.revise``)."""
    now = utcnow()
    due = now - timedelta(seconds=settings.forecast_interval_seconds)
    with db.session() as session:  # a short transaction: take the turn
        insert_missing(session, FleetForecast, {"id": 1, "computed_at": EPOCH, "body": "{}"}, ["id"])
        turn = [FleetForecast.id == 1]
        if not force:
            turn.append(
                (FleetForecast.computed_at < due)
                | (FleetForecast.computed_at < now - timedelta(seconds=1))
                & _many_since(FleetForecast.computed_at)
            )
        if not update_one(session, FleetForecast, *turn, computed_at=now):
            return False
        previous = session.scalar(select(FleetForecast.body).where(FleetForecast.id == 1)) or "{}"
    old_body = json.loads(previous)
    published: dict[str, float] = old_body.get("published", {})
    started = time.perf_counter()
    with db.session() as session:  # reads only: no write lock held while it plays the fleet forward
        made = _make(session, catalog, settings)
        waiting = {job.id for job in made.queued}
        left = _left_queue(session, [job_id for job_id in published if job_id not in waiting])
    took = time.perf_counter() - started
    revisions = _revise(parse(old_body), made, published, left)
    # A forecast that took long (a queue of tens of thousands) is not redone before ten times its cost
    # has passed: its stamp is moved ahead, which the other processes' turns compare against.
    stamp = utcnow() + timedelta(seconds=max(0.0, SPREAD * took - settings.forecast_interval_seconds))
    with db.session() as session:
        stored = update(FleetForecast).where(FleetForecast.id == 1)
        session.execute(stored.values(body=json.dumps(made.body), computed_at=stamp))
        _record_revisions(session, revisions)
    log.debug("forecast of %d jobs in %.0f ms", len(made.body["jobs"]), took * 1000)
    return True


def _many_since(stamp: Any) -> Any:
    """SQL: at least ``SINGLES_BEFORE_REFRESH`` jobs were created after ``stamp``."""
    newer = select(Job.id).where(Job.created_at > stamp).limit(SINGLES_BEFORE_REFRESH).subquery()
    return select(func.count()).select_from(newer).scalar_subquery() >= SINGLES_BEFORE_REFRESH


def _left_queue(session: Session, ids: list[str]) -> list[tuple[Queued, float]]:
    """Of the jobs ``ids`` (queued at the last forecast, not now), those handed to a group since,
    with when they started (claimed; else handed out, which a claim follows at once)."""
    if not ids:
        return []
    rows = session.execute(
        select(
            Job.id,
            Job.model,
            Job.priority,
            Job.tenant,
            Job.created_at,
            Job.output_seconds,
            Job.claimed_at,
            Job.enqueued_at,
        ).where(Job.id.in_([uuid.UUID(job_id) for job_id in ids]))
    )
    found = []
    for row in rows:
        start = row.claimed_at or row.enqueued_at
        if start is None:  # canceled while it waited
            continue
        submitted, output_s = row.created_at.timestamp(), float(row.output_seconds or 0.0)
        job = Queued(str(row.id), row.model, row.priority, row.tenant, submitted, output_s)
        found.append((job, start.timestamp()))
    return found


def _revise(
    old: Stored | None, made: Made, published: dict[str, float], left: Sequence[tuple[Queued, float]]
) -> dict[str, dict[str, Any]]:
    """The revisions of the queued jobs' ETAs from ``old`` to ``made`` (job id -> revision), and the
    ETA each job shows from now on, kept in ``made.body["published"]``. ``left``: the jobs that left
    the queue since ``old``, with their starts: one that started past its ETA by a revision's margin
    unrevised is revised now (``forecast.late_start``)."""
    new = parse(made.body)
    assert new is not None
    before = old.forecast if old is not None else None
    since = before.at if before is not None else made.body["at"]
    behind = behind_counts(made.queued, since)
    shown: dict[str, float] = {}
    found: dict[str, dict[str, Any]] = {}
    for job in made.queued:
        queued = Queued(job.id, job.model, job.priority, job.tenant, job.submitted, job.output_s)
        was = published.get(job.id)
        if was is None and before is not None:  # what it showed since it was submitted
            place = Queued(**{**queued.__dict__, "behind": behind.get(job.id, 0)}).place(before)
            was = None if place is None else place.start
        now_shows, revision = revise(before, new.forecast, queued, was)
        if now_shows is not None:
            shown[job.id] = round(now_shows, 2)
        if revision is not None:
            found[job.id] = revision
    for gone, start in left:
        late = late_start(before, new.forecast, gone, published.get(gone.id), start)
        if late is not None:
            found[gone.id] = late
    made.body["published"] = shown
    return found


def _record_revisions(session: Session, revisions: dict[str, dict[str, Any]]) -> None:
    """Append each job's revision to its ``eta_revisions`` (the last ``REVISIONS_KEPT``)."""
    if not revisions:
        return
    ids = [uuid.UUID(job_id) for job_id in revisions]
    logs: dict[uuid.UUID, list[dict[str, Any]] | None] = {
        row.id: row.eta_revisions
        for row in session.execute(select(Job.id, Job.eta_revisions).where(Job.id.in_(ids)))
    }
    rows = []
    for job_id, revision in revisions.items():
        entry = {
            "at": _at(float(revision["at"])).isoformat(),
            "old": _at(float(revision["old"])).isoformat(),
            "new": _at(float(revision["new"])).isoformat(),
            "cause": str(revision["cause"]),
        }
        key = uuid.UUID(job_id)
        if key in logs:
            rows.append({"id": key, "eta_revisions": [*(logs[key] or []), entry][-REVISIONS_KEPT:]})
    if rows:
        session.execute(update(Job), rows)


# --- reading it ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stored:
    """A stored forecast, parsed."""

    forecast: Forecast
    no_group: frozenset[str]
    not_measured: frozenset[str]
    run_s: dict[str, tuple[float, float]]


def parse(body: dict[str, Any]) -> Stored | None:
    """The stored JSON as a Forecast (None: none stored yet)."""
    if "at" not in body:
        return None
    run_s = {m: (float(v[0]), float(v[1])) for m, v in body.get("run_s", {}).items()}
    competing: dict[int, dict[str, float]] = {}
    for p, t, w in body.get("competing", []):
        competing.setdefault(int(p), {})[t] = float(w)
    return Stored(
        forecast=Forecast(
            at=float(body["at"]),
            jobs={k: (float(v[0]), float(v[1])) for k, v in body.get("jobs", {}).items()},
            next_start={(m, int(p), t): float(v) for m, p, t, v in body.get("next_start", [])},
            spacing={(m, int(p), t): float(v) for m, p, t, v in body.get("spacing", [])},
            unservable=frozenset(body.get("no_group", [])),
            positions={k: int(v) for k, v in body.get("positions", {}).items()},
            next_position={(m, int(p), t): int(n) for m, p, t, n in body.get("next_position", [])},
            hosts={m: tuple(h) for m, h in body.get("hosts", {}).items()},
            cards={m: int(n) for m, n in body.get("cards", {}).items()},
            competing=competing,
            run_s=run_s,
            weights={t: float(w) for t, w in body.get("weights", {}).items()},
            expected=int(body.get("expected", 0)),
        ),
        no_group=frozenset(body.get("no_group", [])),
        not_measured=frozenset(body.get("not_measured", [])),
        run_s=run_s,
    )


def latest(services: WithCaches) -> Stored | None:
    """The newest stored forecast: this process's copy (``Services.caches``), checked for a newer one
    at most every ``caches.FORECAST_SECONDS`` and read again only when another process replaced it
    (the same object until then: the fast path's kept answers rest on that)."""

    def read(kept: tuple[Any, Stored | None] | None) -> tuple[Any, Stored | None]:
        with services.db.reading() as conn:
            stamp = conn.execute(select(FleetForecast.computed_at).where(FleetForecast.id == 1)).scalar()
            if stamp is None or (kept is not None and stamp == kept[0]):
                return kept if kept is not None else (None, None)
            raw = conn.execute(select(FleetForecast.body).where(FleetForecast.id == 1)).scalar()
            return stamp, parse(json.loads(raw or "{}"))

    return services.caches.forecast.get(None, read)[1]


def _at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def eta_of(stored: Stored | None, job: Job, *, behind: int = 0) -> Eta | None:
    """The ETA of a queued or running job (None for a finished one), with a queued job's position.
    ``behind``: the jobs of its tenant, model and priority submitted after the forecast and before it
    (``behind_of``), for a job the forecast has not placed yet."""
    status = JobStatus(job.status)
    if status.is_terminal:
        return None
    # Handed to its group: it is that group's next job, and nothing starts before it there.
    handed = status == JobStatus.QUEUED and job.dispatched_to is not None
    if stored is None:
        return Eta(None, None, "unknown", 0 if handed else None)
    if job.model in stored.no_group:
        return Eta(None, None, "no_group")
    basis = "not_measured" if job.model in stored.not_measured else "forecast"
    made = stored.forecast
    assumes, share = _assumes(made, job), _share(made, job)
    item = made.jobs.get(str(job.id))
    if status == JobStatus.RUNNING:
        start = item[0] if item is not None else None
        began = job.started_at or job.claimed_at or (_at(start) if start is not None else None)
        return Eta(began, _at(item[1]) if item is not None else None, basis, None, assumes, share)
    if item is not None:
        position = 0 if handed else made.positions.get(str(job.id))
        return Eta(_at(item[0]), _at(item[1]), basis, position, assumes, share)
    output_s = float(job.output_seconds or 0.0)
    place = made.place(
        job_id=str(job.id),
        model=job.model,
        priority=job.priority,
        tenant=job.tenant,
        output_s=output_s,
        behind=behind,
    )
    if place is None:
        return Eta(None, None, "unknown")
    overhead, speed = stored.run_s.get(job.model, (0.0, 1.0))
    run = overhead + speed * output_s
    position = 0 if handed else place.position
    return Eta(_at(place.start), _at(place.start + run), basis, position, assumes, share)


def _assumes(made: Forecast, job: Job) -> dict[str, Any]:
    """What the forecast behind an ETA assumed: the tenants competing at the job's priority, the
    arrivals it expected besides what was queued, and when it was made."""
    return {
        "competing_tenants": sorted(made.competing.get(job.priority, {})),
        "expected_jobs": made.expected,
        "as_of": _at(made.at),
    }


def _share(made: Forecast, job: Job) -> dict[str, Any] | None:
    """The tenant's share of the cards that may run the job's model, as fair share gives it against
    the tenants that had jobs queued at its priority: "4 teams queued; you get 2 of 8 cards"."""
    cards = made.cards.get(job.model)
    if not cards:
        return None
    fraction, tenants = made.share(job.tenant, job.priority)
    mine = round(fraction * cards, 1)
    teams = "1 team" if tenants == 1 else f"{tenants} teams"
    return {
        "tenants": tenants,
        "fraction": round(fraction, 4),
        "cards": cards,
        "text": f"{teams} queued; you get {mine:g} of {cards} cards",
    }


def behind_of(conn: Session | Connection, stored: Stored | None, job: Job) -> int:
    """The jobs of ``job``'s tenant, model and priority still waiting that were submitted after the
    stored forecast and before ``job`` (0 for a job the forecast placed): one index range."""
    if stored is None or JobStatus(job.status) != JobStatus.QUEUED or str(job.id) in stored.forecast.jobs:
        return 0
    since = _at(stored.forecast.at)
    if job.created_at <= since:
        return 0
    count = select(func.count()).where(
        Job.model == job.model,
        Job.status == JobStatus.QUEUED,
        Job.priority == job.priority,
        Job.tenant == job.tenant,
        Job.created_at > since,
        tuple_(Job.created_at, Job.id)
        < tuple_(literal(job.created_at, Job.created_at.type), literal(job.id, Job.id.type)),
        Job.dispatched_to.is_(None),
    )
    return int(conn.execute(count).scalar() or 0)


def running_finish(stored: Stored | None, job: Job) -> datetime | None:
    """When a running job should end: its start plus its model's measured run time."""
    if stored is None or job.started_at is None and job.claimed_at is None:
        return None
    overhead, speed = stored.run_s.get(job.model, (0.0, 1.0))
    began = job.started_at or job.claimed_at
    assert began is not None
    return began + timedelta(seconds=overhead + speed * float(job.output_seconds or 0.0))


__all__ = [
    "FRESH",
    "Eta",
    "Stored",
    "behind_of",
    "compute",
    "eta_of",
    "latest",
    "refresh",
    "running_finish",
    "uuid",
]
