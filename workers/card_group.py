"""This worker's card group in the fleet: its row, its residency, its ledger and its next job.

A worker process is one card group (``jobservice.fleet``). When it starts it registers the group
(what it may serve, the memory of its cards; nothing resident); a new pool child, which holds no
model yet, says so. While it runs jobs it carries out the evictions the dispatcher decided, records
each load and eviction, drives the ledger through its ``CardClock``, and, as soon as a job is done
with the card, asks the dispatcher for the group's next job so the card never waits for a
maintenance round.
"""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from jobservice.catalog import ModelSpec
from jobservice.fleet import card_groups, costs
from jobservice.fleet.dispatch import dispatch_round
from jobservice.fleet.placement import DeviceContext
from jobservice.fleet.policy import CardGroupState, ModelCost, Resident, evictions_for
from jobservice.jobs.reaper import hand_back_all
from jobservice.wiring import Services
from workers.card_clock import CardClock

log = logging.getLogger(__name__)


def cost_of(spec: ModelSpec) -> ModelCost:
    """What the policy needs of ``spec`` to decide what fits (its footprint)."""
    return ModelCost(
        id=spec.id, cards=spec.cards, memory_gb=costs.memory_gb(spec), per_run=costs.per_run(spec)
    )


@dataclass
class FleetMember:
    """This process's group (see the module docstring)."""

    services: Services
    group_id: str
    device: DeviceContext
    memory_gb_per_card: float | None
    eligible: list[str]
    clock: CardClock = field(init=False)

    def __post_init__(self) -> None:
        self.clock = CardClock(self.services.db, self.group_id)

    # --- the group's row ------------------------------------------------------------------------
    def register(self, *, last_seen: datetime | None = None) -> None:
        """The worker starts: the group's row, nothing resident, its ledger resumed."""
        with self.services.db.session() as session:
            card_groups.register(
                session,
                group_id=self.group_id,
                devices=self.device.label,
                kind=self.device.kind,
                cards=self.device.count,
                memory_gb_per_card=self.memory_gb_per_card,
                eligible=self.eligible,
                hostname=socket.gethostname(),
                last_seen=last_seen,
            )

    def forget_residency(self, reason: str) -> None:
        """A new pool child holds nothing (the one before it may have held models)."""
        self._write(lambda s: card_groups.forget_residency(s, self.group_id, reason=reason))

    # --- what fits --------------------------------------------------------------------------------
    def evictions(
        self, spec: ModelSpec, held: dict[str, Resident], *, decided: tuple[str, ...] | None
    ) -> tuple[str, ...]:
        """The models to unload before ``spec`` runs beside the rest.

        ``decided`` is what the dispatcher decided to evict (the job's message carries it): carried
        out as it is, for the models this process still holds. None means the message had no
        decision (an older release sent it) or there is no message (a preload): the least recently
        used go first, and the queue is never read. Either way, when what stays still would not
        fit (the dispatcher decided on the residency this group last wrote, and a write can fail),
        the least recently used of the rest go too: the cards never hold more than fits.
        """
        others = set(held) - {spec.id}
        first = tuple(m for m in decided or () if m in others)
        if self.memory_gb_per_card is None or not others - set(first):
            return first
        models = {m: cost_of(s) for m in [*held, spec.id] if (s := self.services.catalog.get(m)) is not None}
        if spec.id not in models:
            return first
        state = CardGroupState(
            id=self.group_id,
            cards=self.device.count,
            eligible=frozenset([*self.eligible, spec.id]),
            memory_gb_per_card=self.memory_gb_per_card,
            resident={m: r for m, r in held.items() if m not in first},
        )
        more = evictions_for(state, models[spec.id], models) or ()
        if more and decided is not None:
            log.warning(
                "group %s: %s does not fit beside %s after the dispatcher's evictions (%s); "
                "also unloading %s, least recently used first",
                self.group_id,
                spec.id,
                ", ".join(sorted(others - set(first))),
                ", ".join(first) or "none",
                ", ".join(more),
            )
        return first + more

    # --- what happened -------------------------------------------------------------------------
    def evicted(self, models: Iterable[str], *, for_model: str, job_id: uuid.UUID | None) -> None:
        """Models were unloaded to make room for ``for_model``."""
        names = list(models)
        self._write(
            lambda s: card_groups.note_evicted(
                s, self.group_id, names, reason=f"room for {for_model}", job_id=job_id
            )
        )

    def loaded(self, spec: ModelSpec, *, seconds: float, job_id: uuid.UUID | None, reason: str) -> None:
        """``spec`` is resident now (a per-run model leaves nothing on the cards: only timed)."""

        def write(session: Session) -> None:
            if not costs.per_run(spec):
                card_groups.note_loaded(
                    session, self.group_id, spec.id, seconds=seconds, reason=reason, job_id=job_id
                )
                costs.record_load(session, model=spec.id, kind=self.device.kind, seconds=seconds)

        self._write(write)

    def load_failed(self, spec: ModelSpec, *, reason: str, job_id: uuid.UUID | None) -> None:
        """A load failed (its job fails as model_load_failed)."""
        self._write(
            lambda s: card_groups.note_load_failed(s, self.group_id, spec.id, reason=reason, job_id=job_id)
        )

    def holds(self, held: dict[str, Resident]) -> None:
        """A job starts on what the group holds: write the whole of it (last use included)."""
        stamps = {
            m: (datetime.fromtimestamp(r.since, UTC), datetime.fromtimestamp(r.last_used, UTC))
            for m, r in held.items()
        }
        self._write(lambda s: card_groups.note_resident(s, self.group_id, stamps))

    # --- the card's next job --------------------------------------------------------------------
    def released(self, job_id: uuid.UUID) -> None:
        """The job is done with the card (it may still be finishing): hand the group its next job."""
        self._write(lambda s: card_groups.release_job(s, self.group_id, job_id))
        self.clock.generated(job_id)
        self.dispatch()

    def ended(self, job_id: uuid.UUID, *, on_card: bool) -> None:
        """The job's run is over. ``on_card``: it ended before it was done with the card (a failure
        before or during generation), so the card is free now and the group takes its next job."""
        if on_card:
            self._write(lambda s: card_groups.release_job(s, self.group_id, job_id))
        self.clock.ended(job_id)
        if on_card:
            self.dispatch()

    # --- stopping ---------------------------------------------------------------------------------
    def drain(self) -> list[uuid.UUID]:
        """The worker was asked to stop: the group takes no new job from now on (the dispatcher
        sends it none, a claim is refused), and every job dispatched to it and not yet claimed goes
        back to the dispatcher, whose round (rung at once) hands it to another group. Returns those
        jobs. The job the group runs finishes."""
        try:
            with self.services.db.session() as session:
                card_groups.start_draining(session, self.group_id)
            handed = hand_back_all(self.services.db, self.group_id)
        except Exception:  # noqa: BLE001 - stopping goes on; the reaper hands back what it left
            log.warning("group %s: could not mark it draining", self.group_id, exc_info=True)
            return []
        if handed:
            log.info("group %s drains: handed back %s", self.group_id, ", ".join(str(job) for job in handed))
            self.ring()
        return handed

    def ring(self) -> None:
        """Ask a dispatcher for a round now (a failure is left to the maintenance rounds)."""
        try:
            self.services.dispatch_bell.ring()
        except Exception:  # noqa: BLE001 - a hint only
            log.warning("group %s: could not wake a dispatcher", self.group_id, exc_info=True)

    # --- its cards' health -----------------------------------------------------------------------
    def health(self, problems: list[str]) -> None:
        """What the group's cards say now (``problems``: each a sentence; empty: all healthy)."""
        changed = False

        def write(session: Session) -> None:
            nonlocal changed
            changed = card_groups.set_health(session, self.group_id, problems)

        self._write(write)
        if not changed:
            return
        if problems:
            log.warning("group %s is unhealthy and takes no job: %s", self.group_id, "; ".join(problems))
        else:
            log.warning("group %s: its cards are healthy again; it takes jobs", self.group_id)
            self.ring()

    def dispatch(self) -> None:
        """A dispatch round (a failure is left to the maintenance rounds)."""
        try:
            dispatch_round(self.services)
        except Exception:  # noqa: BLE001 - the maintenance round dispatches within seconds
            log.warning("dispatch after a job failed; a maintenance round will", exc_info=True)

    def _write(self, change: Callable[[Session], object]) -> None:
        try:
            with self.services.db.session() as session:
                change(session)
        except Exception:  # noqa: BLE001 - bookkeeping must never fail a job
            log.warning("group %s: could not record a change", self.group_id, exc_info=True)
