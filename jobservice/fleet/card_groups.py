"""Card groups in the database: what each may serve, holds and runs, and its ledger.

The truth about residency lives here, so that a restarted worker, the API and the pages all see it:
``fleet_groups`` has one row per group (the worker's node name) with its eligible models, the models
it holds (since when, last used), the job it loads or generates and the one dispatched to it next.

**The ledger.** Every second of every group is in exactly one state (``STATES``): a transition
closes the group's open span and opens the next one at the same instant, so a group's spans tile its
life without gaps or overlaps and their durations sum to its wall time. A worker writes its own
transitions; a group whose worker died is moved to ``down`` (from when it was last seen) by whoever
notices, and out of it again when its worker comes back. Loads, evictions and failed loads are
``fleet_events``.

**Taking no job.** A group is given jobs only while it is ``accepting``: not *draining* (its worker
was asked to stop: it finishes the job it runs and takes no other), not *unhealthy* (a card's vendor
tool reports a problem: the ledger says ``unhealthy`` whenever the group runs no job, until the card
is healthy again) and not *retired*. A group down for longer than the retention with no worker is
retired (``retire_lost_groups``; ``retire`` for an operator's ``jobservice fleet forget``): its
ledger is closed and it leaves /fleet and /metrics, while its rows stay as history; should its
worker come back, it registers as a new stretch of the same group.

Writes lock the group's row first (PostgreSQL; SQLite has one writer), so a worker's transitions and
another process marking the group down never interleave.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, delete, select, update
from sqlalchemy.orm import Session

from jobservice.db.engine import Database
from jobservice.db.tables import FleetEvent, FleetGroup, FleetOffer, LedgerSpan, WorkerRecord, utcnow
from jobservice.errors import Conflict, NotFound

GENERATING = "generating"
LOADING = "loading"
FINISHING = "finishing"
IDLE_WARM = "idle_warm"
IDLE_EMPTY = "idle_empty"
UNHEALTHY = "unhealthy"
DOWN = "down"
STATES = (GENERATING, LOADING, FINISHING, IDLE_WARM, IDLE_EMPTY, UNHEALTHY, DOWN)
IDLE_STATES = (IDLE_WARM, IDLE_EMPTY, UNHEALTHY)  # what a group runs no job in


def accepting() -> ColumnElement[bool]:
    """The SQL condition of a group that may be given a job (``FleetGroup.accepting``)."""
    return and_(
        FleetGroup.draining_since.is_(None),
        FleetGroup.unhealthy_since.is_(None),
        FleetGroup.retired_at.is_(None),
    )


def free_now() -> ColumnElement[bool]:
    """The SQL condition of a group that looks free: accepting, not down, running no job and with
    none dispatched to it (the dispatcher's round decides from the whole fleet; this is the cheap
    read a submission makes, and the compare-and-swap that takes a standing offer)."""
    return and_(
        FleetGroup.job_id.is_(None), FleetGroup.next_job_id.is_(None), FleetGroup.state != DOWN, accepting()
    )


def _locked(session: Session, group_id: str) -> FleetGroup | None:
    """The group's row, locked until commit. A write comes first: it takes PostgreSQL's row lock and
    SQLite's write lock (which ignores ``FOR UPDATE``, and reads outside a transaction; stack-probe
    section 5), so two writers never both close the same open span."""
    session.execute(
        update(FleetGroup)
        .where(FleetGroup.id == group_id)
        .values(updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    query = select(FleetGroup).where(FleetGroup.id == group_id).with_for_update()
    return session.scalar(query.execution_options(populate_existing=True))


def idle_state(group: FleetGroup) -> str:
    """What a group running no job is in: ``unhealthy`` while a card is, else ``idle_warm`` when it
    holds a model, else ``idle_empty``."""
    if group.unhealthy_since is not None:
        return UNHEALTHY
    return IDLE_WARM if group.resident else IDLE_EMPTY


def _open_span(session: Session, group: FleetGroup) -> LedgerSpan | None:
    return session.get(LedgerSpan, group.span_id) if group.span_id is not None else None


def _move(
    session: Session,
    group: FleetGroup,
    state: str,
    *,
    at: datetime,
    model: str | None = None,
    job_id: uuid.UUID | None = None,
    reason: str | None = None,
) -> datetime:
    """Close the open span at ``at`` (never before it began) and open ``state``; returns when."""
    span = _open_span(session, group)
    if span is not None:
        if span.ended_at is None and (span.state, span.model, span.job_id) == (state, model, job_id):
            return span.started_at
        at = max(at, span.started_at)
        if span.ended_at is None:
            span.ended_at = at
    new = LedgerSpan(
        group_id=group.id,
        state=state,
        model=model,
        job_id=job_id,
        cards=group.cards,
        started_at=at,
        reason=reason,
    )
    session.add(new)
    session.flush()
    group.span_id = new.id
    group.state, group.state_model, group.state_since = state, model, at
    group.updated_at = utcnow()
    return at


def register(
    session: Session,
    *,
    group_id: str,
    devices: str,
    kind: str,
    cards: int,
    memory_gb_per_card: float | None,
    eligible: list[str],
    hostname: str,
    last_seen: datetime | None = None,
) -> None:
    """A worker starting on the group: its row with nothing resident, and its ledger resumed. A span
    left open by an earlier worker of the group ends when that worker was last seen (``last_seen``),
    and the time since then is ``down``. A new worker drains nothing and is back from retirement
    (a retired group's ledger was closed: it resumes now); its cards' health is read again."""
    now = utcnow()
    group = _locked(session, group_id)
    if group is None:
        group = FleetGroup(id=group_id, state=IDLE_EMPTY, state_since=now, started_at=now, resident={})
        session.add(group)
    group.devices, group.kind, group.cards = devices, kind, cards
    group.memory_gb_per_card, group.eligible, group.hostname = memory_gb_per_card, list(eligible), hostname
    group.resident, group.job_id, group.busy_until = {}, None, None
    group.started_at = now
    group.draining_since = group.unhealthy_since = group.health = group.retired_at = None
    span = _open_span(session, group)
    if span is not None and span.ended_at is None and span.state != DOWN:
        gone = max(span.started_at, min(now, last_seen or now))
        _move(session, group, DOWN, at=gone, reason="worker stopped")
    _move(session, group, IDLE_EMPTY, at=now, reason="worker started")


def set_state(
    session: Session, group_id: str, state: str, *, model: str | None = None, job_id: uuid.UUID | None = None
) -> None:
    """Move the group to ``state`` now (a no-op when it is already there for the same model and job)."""
    group = _locked(session, group_id)
    if group is not None:
        _move(session, group, state, at=utcnow(), model=model, job_id=job_id)


def to_idle(session: Session, group_id: str) -> None:
    """Move the group to idle warm or idle empty, by what it holds, now."""
    group = _locked(session, group_id)
    if group is not None:
        _move(session, group, idle_state(group), at=utcnow())


def take_job(session: Session, group_id: str, job_id: uuid.UUID, *, model: str) -> None:
    """A claim: the group runs ``job_id`` now (the dispatcher set until about when)."""
    group = _locked(session, group_id)
    if group is None:
        return
    group.job_id = job_id
    if group.next_job_id == job_id:
        group.next_job_id = None
    _move(session, group, GENERATING, at=utcnow(), model=model, job_id=job_id, reason="claimed")


def release_job(session: Session, group_id: str, job_id: uuid.UUID) -> None:
    """The group's card is done with ``job_id`` (generation over, or the run ended before it). Its
    standing offers (``jobservice.fleet.offers``) were made before that job and go with it: free
    again, the group takes a new job only as the round its worker runs next decides (which makes
    them again if nothing waits). They are deleted before the group's row is locked, the order a
    submission taking an offer locks them in."""
    session.execute(delete(FleetOffer).where(FleetOffer.group_id == group_id))
    group = _locked(session, group_id)
    if group is not None and group.job_id == job_id:
        group.job_id, group.busy_until = None, None


def note_loaded(
    session: Session,
    group_id: str,
    model: str,
    *,
    seconds: float,
    reason: str,
    job_id: uuid.UUID | None = None,
) -> None:
    """``model`` is resident on the group now (loaded in ``seconds``)."""
    group = _locked(session, group_id)
    if group is None:
        return
    now = utcnow()
    resident = dict(group.resident or {})
    resident[model] = {"since": now.isoformat(), "last_used": now.isoformat()}
    group.resident = resident
    session.add(
        FleetEvent(
            group_id=group_id, at=now, kind="load", model=model, reason=reason, seconds=seconds, job_id=job_id
        )
    )


def note_load_failed(
    session: Session, group_id: str, model: str, *, reason: str, job_id: uuid.UUID | None
) -> None:
    """A load of ``model`` failed (the job fails with ``model_load_failed``)."""
    session.add(
        FleetEvent(
            group_id=group_id,
            at=utcnow(),
            kind="load_failed",
            model=model,
            reason=reason[:128],
            job_id=job_id,
        )
    )


def note_evicted(
    session: Session, group_id: str, models: Iterable[str], *, reason: str, job_id: uuid.UUID | None = None
) -> None:
    """``models`` were unloaded from the group (each event records how long it had been resident)."""
    group = _locked(session, group_id)
    if group is None:
        return
    now = utcnow()
    resident = dict(group.resident or {})
    for model in models:
        held = resident.pop(model, None)
        since = datetime.fromisoformat(held["since"]) if held else now
        age = max(0.0, (now - since).total_seconds())
        session.add(
            FleetEvent(
                group_id=group_id,
                at=now,
                kind="evict",
                model=model,
                reason=reason,
                seconds=age,
                job_id=job_id,
            )
        )
    group.resident = resident


def note_resident(session: Session, group_id: str, held: dict[str, tuple[datetime, datetime]]) -> None:
    """What the group's worker holds, as it knows it: model -> (since, last used). Written whenever
    a job starts, so a note that could not be written earlier is put right."""
    group = _locked(session, group_id)
    if group is not None:
        group.resident = {
            m: {"since": s.isoformat(), "last_used": u.isoformat()} for m, (s, u) in held.items()
        }


def forget_residency(session: Session, group_id: str, *, reason: str) -> None:
    """The group's worker process lost what it held (a new worker child): nothing is resident."""
    group = _locked(session, group_id)
    if group is None:
        return
    if group.resident:
        note_evicted(session, group_id, list(group.resident), reason=reason)
    group.job_id, group.busy_until = None, None
    _move(session, group, idle_state(group), at=utcnow(), reason=reason)


def mark_down(session: Session, group_id: str, *, at: datetime, reason: str) -> bool:
    """The group's worker is gone: nothing resident, nothing running, ``down`` from ``at`` (when it
    was last seen). False if it was down already."""
    group = _locked(session, group_id)
    if group is None or group.state == DOWN:
        return False
    if group.resident:
        note_evicted(session, group_id, list(group.resident), reason=reason)
    group.job_id, group.next_job_id, group.busy_until = None, None, None
    _move(session, group, DOWN, at=at, reason=reason)
    return True


def start_draining(session: Session, group_id: str) -> None:
    """The group's worker was asked to stop: it takes no new job from now on, and its next-job slot
    is empty (the caller hands the jobs dispatched to it back to the dispatcher)."""
    group = _locked(session, group_id)
    if group is None:
        return
    if group.draining_since is None:
        group.draining_since = utcnow()
    group.next_job_id = None


def set_health(session: Session, group_id: str, problems: list[str]) -> bool:
    """What the group's cards say now (``problems``: empty when every card is healthy). A group
    with a problem becomes unhealthy (in the ledger too, at once if it runs no job, else when its
    job ends); one whose cards are healthy again goes back to idle. True when it changed either way."""
    group = _locked(session, group_id)
    if group is None:
        return False
    now = utcnow()
    if problems:
        changed = group.unhealthy_since is None
        if changed:
            group.unhealthy_since = now
        group.health = list(problems)
        if group.state in IDLE_STATES and group.state != UNHEALTHY:
            _move(session, group, UNHEALTHY, at=now, reason=problems[0][:128])
        return changed
    if group.unhealthy_since is None:
        return False
    group.unhealthy_since, group.health = None, None
    if group.state == UNHEALTHY:
        _move(session, group, idle_state(group), at=now, reason="cards healthy again")
    return True


def retire(session: Session, group_id: str, *, reason: str, at: datetime | None = None) -> bool:
    """Retire the group: its ledger closed (at ``at``, else now), nothing held or dispatched, gone
    from /fleet and /metrics; its rows stay. False if it was retired already (or is unknown)."""
    group = _locked(session, group_id)
    if group is None or group.retired_at is not None:
        return False
    now = utcnow()
    at = min(at or now, now)
    span = _open_span(session, group)
    if span is not None and span.ended_at is None:
        span.ended_at = max(at, span.started_at)
    if group.resident:
        note_evicted(session, group_id, list(group.resident), reason=reason)
    group.job_id, group.next_job_id, group.busy_until = None, None, None
    group.retired_at = now
    return True


def forget(db: Database, group_id: str, *, stale_after_seconds: float) -> datetime:
    """An operator retires ``group_id`` now (``jobservice fleet forget``, ``DELETE /fleet/groups/<id>``)
    rather than after the retention; returns when it was retired (at once again if it was already).
    Refused for a group whose worker is online: stop the worker first."""
    now = utcnow()
    with db.session() as session:
        found = session.execute(
            select(FleetGroup, WorkerRecord)
            .outerjoin(WorkerRecord, WorkerRecord.id == FleetGroup.id)
            .where(FleetGroup.id == group_id)
        ).first()
        if found is None:
            raise NotFound("group_not_found", f"There is no card group '{group_id}'.")
        group, worker = found
        if group.retired_at is not None:
            return group.retired_at
        if is_online(worker, stale_after_seconds=stale_after_seconds, now=now):
            assert worker is not None
            seen = max(0.0, (now - worker.last_seen_at).total_seconds())
            raise Conflict(
                "group_online",
                f"Card group '{group_id}' is online (its worker was seen {seen:.0f} s ago): stop its "
                "worker first. A group retires by itself once it has been down for the retention.",
            )
        retire(session, group_id, reason="forgotten")
        assert group.retired_at is not None
        return group.retired_at


def retire_lost_groups(db: Database, *, retention_seconds: float, stale_after_seconds: float) -> list[str]:
    """Retire every group down for longer than ``retention_seconds`` whose worker is gone (its ledger
    closed at the end of that retention); returns their ids."""
    now = utcnow()
    cutoff = now - timedelta(seconds=retention_seconds)
    with db.session() as session:
        pairs = groups_with_presence(session)
    retired = []
    for group, worker in pairs:
        if group.state != DOWN or group.state_since > cutoff:
            continue
        if is_online(worker, stale_after_seconds=stale_after_seconds, now=now):
            continue
        with db.session() as session:
            ended = group.state_since + timedelta(seconds=retention_seconds)
            if retire(session, group.id, reason="retired", at=ended):
                retired.append(group.id)
    return retired


def groups_with_presence(
    session: Session, *, retired: bool = False
) -> list[tuple[FleetGroup, WorkerRecord | None]]:
    """Every group with its worker's presence row (None: never announced); retired groups too only
    when ``retired``."""
    query = select(FleetGroup, WorkerRecord).outerjoin(WorkerRecord, WorkerRecord.id == FleetGroup.id)
    if not retired:
        query = query.where(FleetGroup.retired_at.is_(None))
    rows = session.execute(query.order_by(FleetGroup.id))
    return [(group, worker) for group, worker in rows]


def is_online(worker: WorkerRecord | None, *, stale_after_seconds: float, now: datetime) -> bool:
    """Whether the group's worker was seen lately and has not stopped."""
    return (
        worker is not None
        and worker.stopped_at is None
        and worker.last_seen_at >= now - timedelta(seconds=stale_after_seconds)
    )


def mark_lost_groups_down(db: Database, *, stale_after_seconds: float) -> list[str]:
    """Move every group whose worker stopped or went silent to ``down``; returns their ids."""
    now = utcnow()
    with db.session() as session:
        pairs = groups_with_presence(session)
    lost = []
    for group, worker in pairs:
        if group.state == DOWN or is_online(worker, stale_after_seconds=stale_after_seconds, now=now):
            continue
        if worker is None:
            seen, reason = group.updated_at, "worker lost"
        else:
            seen = worker.stopped_at or worker.last_seen_at
            reason = "worker stopped" if worker.stopped_at else "worker lost"
        with db.session() as session:
            if mark_down(session, group.id, at=min(now, seen), reason=reason):
                lost.append(group.id)
    return lost


def ledger(
    session: Session, group_id: str, *, since: datetime, until: datetime | None = None
) -> list[LedgerSpan]:
    """The group's spans that overlap ``[since, until)``, oldest first."""
    until = until or utcnow()
    crossing = session.scalar(
        select(LedgerSpan)
        .where(LedgerSpan.group_id == group_id, LedgerSpan.started_at < since)
        .order_by(LedgerSpan.started_at.desc(), LedgerSpan.id.desc())
        .limit(1)
    )
    later = session.scalars(
        select(LedgerSpan)
        .where(LedgerSpan.group_id == group_id, LedgerSpan.started_at >= since, LedgerSpan.started_at < until)
        .order_by(LedgerSpan.started_at, LedgerSpan.id)
    )
    spans = list(later)
    if crossing is not None and (crossing.ended_at is None or crossing.ended_at > since):
        spans.insert(0, crossing)
    return spans
