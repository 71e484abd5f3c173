"""Waiting for jobs and sets (job groups, nightly runs) to change: one query per interval per process.

Live event streams (``GET /jobs/<id>/stream``) and ``Prefer: wait=N`` both wait for a job to
change. Instead of each waiter reading its row in a loop, one ``Watcher`` per API process polls
every job and set someone is waiting on in a single query every ``interval`` seconds (not at
all while nobody waits), and wakes the waiters whose row changed (a ``threading.Condition``).
The cost is one indexed query per interval whatever the number of streams; the delay is at most
one interval, shorter than a worker's progress writes (``progress_min_interval_seconds``).

A state is a small frozen value (``JobState``/``SetState``); it also makes the streams' resume
tokens (``to_token``/``job_state_from_token``), so a reconnecting client is never sent a state
it already has, from any API process.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import astuple, dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import func, select

from jobservice.db.tables import Batch, Job, JobGroup, JobStatus
from jobservice.fleet.eta import Eta, Stored, behind_of, eta_of, latest, running_finish
from jobservice.jobs.previews import preview_number
from jobservice.wiring import Services

log = logging.getLogger(__name__)

Kind = Literal["job", "set"]
Key = tuple[Kind, uuid.UUID]
MAX_TOKEN_CHARS = 512


@dataclass(frozen=True)
class JobState:
    """What a job's live view shows: a change of any field is an event."""

    status: str
    stage: str
    progress: float
    queue_position: int | None
    cancel_requested: bool
    attempts: int
    eta: str | None = None  # the estimated start (queued) or finish (running), to the minute
    preview: int = 0  # the number of the running job's latest preview (jobservice.jobs.previews)

    @property
    def is_terminal(self) -> bool:
        """The job has ended (no event follows but ``end``)."""
        return JobStatus(self.status).is_terminal

    def to_token(self) -> str:
        """An opaque resume token (the SSE event id) that names this state."""
        return _encode(astuple(self))


@dataclass(frozen=True)
class SetState:
    """What changes the view of a set of jobs (a job group, or a nightly run: a group with a spec):
    its jobs by status, their summed progress and its cancel; a nightly run adds its own ``status``
    (``running``, ``finished`` or ``canceled``: None for a plain group)."""

    counts: tuple[int, int, int, int, int]  # queued, running, succeeded, failed, canceled
    progress: float  # the running jobs' progress, summed (rounded)
    canceled: bool
    status: str | None = None  # a nightly run's status (jobservice.nightly.states.BatchStatus)

    def to_token(self) -> str:
        """An opaque resume token (the SSE event id) that names this state."""
        return _encode((list(self.counts), self.progress, self.canceled, self.status))


State = JobState | SetState


def _encode(values: tuple[Any, ...]) -> str:
    raw = json.dumps(list(values), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(token: str | None) -> list[Any] | None:
    if not token or len(token) > MAX_TOKEN_CHARS or not token.isascii():
        return None
    try:
        values = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, binascii.Error, RecursionError):
        return None
    return values if isinstance(values, list) else None


def job_state_from_token(token: str | None) -> JobState | None:
    """The state a resume token names, or None for a missing, foreign or damaged token."""
    values = _decode(token)
    try:
        return JobState(*values) if values is not None else None
    except TypeError:
        return None


def set_state_from_token(token: str | None) -> SetState | None:
    """The set state a resume token names, or None for a missing, foreign or damaged token."""
    values = _decode(token)
    try:
        if values is None or len(values) != 4 or len(values[0]) != 5:
            return None
        counts, progress, canceled, status = values
        if status is not None and not isinstance(status, str):
            return None
        return SetState(tuple(int(c) for c in counts), float(progress), bool(canceled), status)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def eta_minute(start: datetime | None, finish: datetime | None) -> str | None:
    """An ETA as a stream state holds it: to the minute, so a forecast's jitter is not an event."""
    moment = start or finish
    return moment.strftime("%Y-%m-%dT%H:%MZ") if moment is not None else None


def job_state_of(view: Any) -> JobState:
    """The state shown by a rendered job view (a ``JobView``)."""
    return JobState(
        status=view.status,
        stage=view.stage,
        progress=round(float(view.progress), 4),
        queue_position=view.queue_position,
        cancel_requested=bool(view.cancel_requested),
        attempts=int(view.attempts),
        eta=eta_minute(view.estimated_start_at, view.estimated_finish_at),
        preview=(view.preview.number or 0) if view.preview is not None else 0,
    )


def read_job_states(
    session: Any, ids: Sequence[uuid.UUID], *, forecast: Stored | None = None
) -> dict[uuid.UUID, JobState]:
    """The states of ``ids`` (missing rows left out), queue positions and ETAs included: the rows in
    one query; positions and ETAs from the stored ``forecast`` (a count only for a queued job
    submitted after it, ``eta.behind_of``)."""
    jobs = list(session.scalars(select(Job).where(Job.id.in_(list(ids)))))
    states: dict[uuid.UUID, JobState] = {}
    for job in jobs:
        status = JobStatus(job.status)
        eta = eta_of(forecast, job, behind=behind_of(session, forecast, job))
        states[job.id] = JobState(
            status=status.value,
            stage=job.stage,
            progress=round(float(job.progress or 0.0), 4),
            queue_position=eta.position if eta is not None and status == JobStatus.QUEUED else None,
            cancel_requested=job.cancel_requested_at is not None and not status.is_terminal,
            attempts=int(job.attempts or 0),
            eta=_eta_minute(forecast, job, eta),
            preview=preview_number(job),
        )
    return states


def _eta_minute(forecast: Stored | None, job: Job, eta: Eta | None) -> str | None:
    if forecast is None or eta is None:
        return None
    if JobStatus(job.status) == JobStatus.RUNNING:
        return eta_minute(None, eta.finish or running_finish(forecast, job))
    return eta_minute(eta.start, eta.finish)


GROUP_ORDER = (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED)


def read_set_states(session: Any, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, SetState]:
    """The states of the sets ``ids`` (missing rows left out): their rows (a nightly run's status
    beside) and one grouped count of their jobs (an index range of ``(group_id, status)`` each). A
    batch an older release made during an upgrade may have no group yet: its jobs count by batch."""
    rows = select(JobGroup.id, JobGroup.canceled_at, Batch.status).outerjoin(Batch, Batch.id == JobGroup.id)
    found = {
        group_id: (canceled_at is not None, status)
        for group_id, canceled_at, status in session.execute(rows.where(JobGroup.id.in_(list(ids))))
    }
    grouped = list(found)
    ungrouped = [i for i in ids if i not in found]
    if ungrouped:
        batches = select(Batch.id, Batch.status).where(Batch.id.in_(ungrouped))
        found.update({i: (status == "canceled", status) for i, status in session.execute(batches)})
    counts: dict[uuid.UUID, dict[JobStatus, int]] = {set_id: {} for set_id in found}
    progress: dict[uuid.UUID, float] = dict.fromkeys(found, 0.0)
    for column, set_ids in ((Job.group_id, grouped), (Job.batch_id, [i for i in ungrouped if i in found])):
        query = (
            select(column, Job.status, func.count(), func.sum(Job.progress))
            .where(column.in_(set_ids))
            .group_by(column, Job.status)
        )
        for set_id, status, jobs, progressed in session.execute(query) if set_ids else ():
            counts[set_id][JobStatus(status)] = int(jobs)
            if JobStatus(status) == JobStatus.RUNNING:
                progress[set_id] = float(progressed or 0.0)
    return {
        set_id: SetState(
            tuple(counts[set_id].get(s, 0) for s in GROUP_ORDER),  # type: ignore[arg-type]
            round(progress[set_id], 3),
            canceled,
            None if status is None else str(status),
        )
        for set_id, (canceled, status) in found.items()
    }


class Watcher:
    """One per process: polls the watched jobs and sets together and wakes their waiters."""

    def __init__(self, services: Services, *, interval: float = 0.25) -> None:
        self._services = services
        self._db = services.db
        self.interval = interval
        # One lock; a condition per watched row (a change wakes only its waiters) and one for
        # the poller, which sleeps on it while nothing is watched.
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._conds: dict[Key, threading.Condition] = {}
        self._watched: Counter[Key] = Counter()
        self._states: dict[Key, State | None] = {}  # None: the row is gone
        self._thread: threading.Thread | None = None
        self._pid = 0
        self.polls = 0  # queries made (for benchmarks and tests)
        self.poll_seconds = 0.0

    @property
    def watched(self) -> int:
        """How many rows are watched now."""
        with self._lock:
            return len(self._watched)

    @contextmanager
    def watching(self, kind: Kind, ident: uuid.UUID) -> Iterator[None]:
        """Keep ``ident`` polled while the block runs."""
        key: Key = (kind, ident)
        with self._lock:
            self._watched[key] += 1
            self._conds.setdefault(key, threading.Condition(self._lock))
            self._ensure_thread()
            self._idle.notify_all()  # the poller may be idle
        try:
            yield
        finally:
            with self._lock:
                self._watched[key] -= 1
                if self._watched[key] <= 0:
                    del self._watched[key]
                    self._states.pop(key, None)
                    self._conds.pop(key, None)

    def current(self, kind: Kind, ident: uuid.UUID) -> State | None:
        """The latest polled state of a watched row (read now if not polled yet); None if gone."""
        key: Key = (kind, ident)
        with self._lock:
            if key in self._states:
                return self._states[key]
        fresh = self._read([key]).get(key)
        with self._lock:
            self._states.setdefault(key, fresh)
            return self._states[key]

    def wait_change(
        self, kind: Kind, ident: uuid.UUID, *, seen: State | None, timeout: float
    ) -> State | None:
        """Block until the watched row's state differs from ``seen`` or ``timeout`` passes; the state."""
        key: Key = (kind, ident)
        deadline = time.monotonic() + timeout
        with self._lock:
            cond = self._conds.get(key, self._idle)  # watched rows have their own
            while True:
                state = self._states.get(key, seen)
                remaining = deadline - time.monotonic()
                if state != seen or remaining <= 0:
                    return state
                cond.wait(remaining)

    def wait_ended(self, job_id: uuid.UUID, *, timeout: float) -> JobState | None:
        """Block until the job has ended or ``timeout`` passes (``Prefer: wait``); its last state."""
        deadline = time.monotonic() + timeout
        with self.watching("job", job_id):
            state = self.current("job", job_id)
            while isinstance(state, JobState) and not state.is_terminal:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                state = self.wait_change("job", job_id, seen=state, timeout=remaining)
        return state if isinstance(state, JobState) else None

    def _ensure_thread(self) -> None:
        # Started on first use and again in a forked child (gunicorn forks after importing us).
        if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._loop, name="job-watcher", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        failing = False
        while True:
            with self._lock:
                while not self._watched:
                    self._idle.wait()
                keys = list(self._watched)
            try:
                fresh = self._read(keys)
            except Exception as exc:  # noqa: BLE001 - a database hiccup must not end the watcher
                if not failing:
                    log.warning("watcher: polling %d watched rows failed: %s", len(keys), exc)
                failing = True
                time.sleep(max(self.interval, 1.0))
                continue
            failing = False
            with self._lock:
                for key in keys:
                    if key in self._watched and self._states.get(key, ...) != fresh.get(key):
                        self._states[key] = fresh.get(key)
                        self._conds[key].notify_all()
            time.sleep(self.interval)

    def _read(self, keys: list[Key]) -> dict[Key, State | None]:
        started = time.perf_counter()
        jobs = [ident for kind, ident in keys if kind == "job"]
        sets = [ident for kind, ident in keys if kind == "set"]
        out: dict[Key, State | None] = dict.fromkeys(keys)
        with self._db.session() as session:
            if jobs:
                forecast = latest(self._services)
                out.update(
                    {("job", i): s for i, s in read_job_states(session, jobs, forecast=forecast).items()}
                )
            if sets:
                out.update({("set", i): s for i, s in read_set_states(session, sets).items()})
        self.polls += 1
        self.poll_seconds += time.perf_counter() - started
        return out
