"""One upkeep round, as every worker's maintenance thread runs it (and ``jobservice reap``): card
groups whose workers are gone move to ``down`` (and those down past the retention are retired), the
reaper requeues dead runs and recovers lost messages, a dispatch round hands free groups their next
jobs, and the queued jobs' ETAs are worked out again when they are due (by one process at a time)."""

from __future__ import annotations

import logging

from jobservice.broker import BrokerInspector, JobMessage, sender
from jobservice.db.tables import utcnow
from jobservice.fleet.card_groups import (
    groups_with_presence,
    is_online,
    mark_lost_groups_down,
    retire_lost_groups,
)
from jobservice.fleet.dispatch import dispatch_round
from jobservice.fleet.eta import refresh as refresh_forecast
from jobservice.fleet.presence import stale_after
from jobservice.jobs.reaper import ReapResult, reap
from jobservice.wiring import Services

log = logging.getLogger(__name__)


class Upkeep:
    """The round's collaborators, built once per process (the broker inspector keeps a connection)."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self._inspector: BrokerInspector | None = None

    def online_groups(self) -> set[str]:
        """The ids of the card groups whose workers were seen lately."""
        now, stale = utcnow(), stale_after(self.services.settings)
        with self.services.db.session() as session:
            pairs = groups_with_presence(session)
        return {g.id for g, w in pairs if is_online(w, stale_after_seconds=stale, now=now)}

    def _pending(self, queues: set[str]) -> set[str]:
        if self._inspector is None:
            self._inspector = BrokerInspector.of(self.services.settings)
        try:
            return self._inspector.pending_job_ids(
                queues, unacked_grace_seconds=self.services.settings.lease_seconds
            )
        except Exception:
            self._inspector = None  # reconnect next time
            raise

    def _send(self, message: JobMessage) -> None:
        sender(self.services.celery)(message)

    def _cards_of(self, model: str) -> int:
        spec = self.services.catalog.get(model)
        return spec.cards if spec else 1

    def run_once(self) -> ReapResult:
        """One round (see the module docstring)."""
        settings = self.services.settings
        lost = mark_lost_groups_down(self.services.db, stale_after_seconds=stale_after(settings))
        if lost:
            log.warning("card groups down (their workers are gone): %s", ", ".join(lost))
        retired = retire_lost_groups(
            self.services.db,
            retention_seconds=settings.group_retention_hours * 3600,
            stale_after_seconds=stale_after(settings),
        )
        if retired:
            log.warning(
                "card groups retired (down over %g h with no worker): %s",
                settings.group_retention_hours,
                ", ".join(retired),
            )
        result = reap(
            self.services.db,
            self._send,
            self._pending,
            self.online_groups,
            resend_after_seconds=settings.resend_after_seconds,
            cards_of=self._cards_of,
            half_life_s=settings.fair_share_half_life_seconds,
        )
        if result.changed:
            log.info(
                "reaper: requeued %d, failed %d, canceled %d, sent %d, handed back %d, broker away %d",
                len(result.requeued),
                len(result.failed),
                len(result.canceled),
                len(result.resent),
                len(result.handed_back),
                len(result.unsent),
            )
        dispatch_round(self.services)
        refresh_forecast(self.services.db, self.services.catalog, settings)  # when due, by one process
        return result
