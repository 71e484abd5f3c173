"""The worker's side of the ledger: which state its cards are in, and what each job used.

The pipeline tells the clock when a job takes the card (``begin``), loads a model (``loading``),
generates (``generating``), is done with the card (``generated``) and has ended (``ended``); the
finisher thread ends jobs while the card may already generate the next. The clock turns that into
the group's ledger state, whichever comes first: a job loading or generating on the card, else a
job still finishing (gate, encode, upload), else idle. Each change is written to the database at
once (``jobservice.fleet.card_groups``), and the time spent in each state is added to the job that was
in it: a job's ``finish`` phase counts only while no other job used the card, so overlapped
finishing is never counted twice.

Writing the ledger must never fail a job: a database hiccup is logged and the next change writes
the state again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from jobservice.db.engine import Database
from jobservice.fleet import card_groups
from jobservice.fleet.usage import Phases

log = logging.getLogger(__name__)

PHASE_OF = {
    card_groups.LOADING: "load_s",
    card_groups.GENERATING: "generate_s",
    card_groups.FINISHING: "finish_s",
}


@dataclass
class _Spent:
    load_s: float = 0.0
    generate_s: float = 0.0
    finish_s: float = 0.0


@dataclass
class CardClock:
    """One group's state as this worker process drives it (see the module docstring)."""

    db: Database
    group_id: str
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _state: str | None = None  # None: idle
    _job: uuid.UUID | None = None  # whose time the current state is
    _model: str | None = None
    _since: float = field(default_factory=time.monotonic)
    _card_job: tuple[uuid.UUID, str] | None = None  # loading or generating on the card
    _finishing: dict[uuid.UUID, str] = field(default_factory=dict)  # job -> model, oldest first
    _spent: dict[uuid.UUID, _Spent] = field(default_factory=dict)

    # --- what the pipeline says --------------------------------------------------------------------
    def begin(self, job_id: uuid.UUID, model: str) -> None:
        """A claimed job takes the card (fetching its inputs counts as generating)."""
        with self._lock:
            self._spent.setdefault(job_id, _Spent())
            self._card_job = (job_id, model)
            self._settle(write=False)  # take_job wrote this transition with the claim

    @contextlib.contextmanager
    def loading(self, job_id: uuid.UUID, model: str) -> Iterator[None]:
        """The card loads ``model`` for ``job_id`` during the block (evictions included)."""
        with self._lock:
            self._card_job = (job_id, model)
            self._set(card_groups.LOADING, job_id, model)
        try:
            yield
        finally:
            with self._lock:
                self._settle()

    def generated(self, job_id: uuid.UUID) -> None:
        """The job is done with the card; it finishes (gate, upload) until ``ended``."""
        with self._lock:
            if self._card_job is not None and self._card_job[0] == job_id:
                self._finishing[job_id] = self._card_job[1]
                self._card_job = None
            self._settle()

    def ended(self, job_id: uuid.UUID) -> None:
        """The job's run is over (its final transition is written, or it was lost)."""
        with self._lock:
            if self._card_job is not None and self._card_job[0] == job_id:
                self._card_job = None
            self._finishing.pop(job_id, None)
            self._settle()
            self._spent.pop(job_id, None)

    def phases(self, job_id: uuid.UUID) -> Phases:
        """The job's time in each phase so far, the state it is in now included."""
        with self._lock:
            spent = self._spent.get(job_id, _Spent())
            extra = time.monotonic() - self._since if self._job == job_id else 0.0
            phase = PHASE_OF.get(self._state or "")
            return Phases(
                load_s=spent.load_s + (extra if phase == "load_s" else 0.0),
                generate_s=spent.generate_s + (extra if phase == "generate_s" else 0.0),
                finish_s=spent.finish_s + (extra if phase == "finish_s" else 0.0),
            )

    # --- the state -----------------------------------------------------------------------------------
    def _settle(self, *, write: bool = True) -> None:
        """Move to the state the jobs imply: on the card, else finishing, else idle."""
        if self._card_job is not None:
            self._set(card_groups.GENERATING, *self._card_job, write=write)
        elif self._finishing:
            job_id, model = next(iter(self._finishing.items()))
            self._set(card_groups.FINISHING, job_id, model, write=write)
        else:
            self._set(None, None, None, write=write)

    def _set(
        self, state: str | None, job_id: uuid.UUID | None, model: str | None, *, write: bool = True
    ) -> None:
        """Account the current state's time to its job, then move to ``state`` (None: idle)."""
        now = time.monotonic()
        phase = PHASE_OF.get(self._state or "")
        if self._job is not None and phase is not None and self._job in self._spent:
            spent = self._spent[self._job]
            setattr(spent, phase, getattr(spent, phase) + (now - self._since))
        self._since = now
        if (state, job_id, model) == (self._state, self._job, self._model):
            return
        self._state, self._job, self._model = state, job_id, model
        if write:
            self._write(state, job_id, model)

    def _write(self, state: str | None, job_id: uuid.UUID | None, model: str | None) -> None:
        try:
            with self.db.session() as session:
                if state is None:
                    card_groups.to_idle(session, self.group_id)
                else:
                    card_groups.set_state(session, self.group_id, state, model=model, job_id=job_id)
        except Exception:  # noqa: BLE001 - the ledger must never fail a job; the next change writes again
            log.warning("group %s: could not record state %s", self.group_id, state or "idle", exc_info=True)
