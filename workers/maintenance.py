"""A worker's background duties: keep its presence row fresh, read its cards' health (a group with
a card that is not healthy takes no job until it is), run the reaper, move card groups whose
workers died to ``down`` (and retire those down too long), and run a dispatch round (anything the
event-driven rounds missed).

The loop starts before Celery connects to the broker (``celeryd_after_setup``), so a worker that
starts, or restarts, while Redis is away still requeues the jobs of dead runs: the reaper's
database moves need no broker, and its sends catch up when the broker is back.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

from jobservice.fleet.placement import inventory
from jobservice.fleet.presence import announce_worker, refresh_host, retire_worker, touch_worker
from jobservice.jobs.upkeep import Upkeep
from jobservice.quotas.usage import forget_old_minutes
from jobservice.wiring import Services
from workers.card_group import FleetMember
from workers.card_health import CardMonitor
from workers.forkguard import guarded

log = logging.getLogger(__name__)

CARDS_EVERY_SECONDS = 60.0  # how often the cards' memory is read again (vendor tools: ~0.1 s each)
FORGET_EVERY_SECONDS = 60.0  # how often per-minute quota counts past their use are dropped


class Maintenance:
    """Runs every ``reap_interval_seconds`` on a daemon thread of the worker's main process."""

    def __init__(
        self,
        services: Services,
        *,
        worker_id: str,
        devices: str,
        models: list[str],
        info: dict[str, object],
        member: FleetMember | None = None,
        cards: CardMonitor | None = None,
    ) -> None:
        self.services = services
        self.worker_id = worker_id
        self.devices = devices
        self.models = models
        self.info = info
        self.member = member  # the worker's card group, whose health ``cards`` reads
        self.cards = cards
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="jobservice-maintenance", daemon=True)
        self.upkeep = Upkeep(services)
        self._announced = False
        self._cards_read_at = time.monotonic()
        self._health_read_at: float | None = None
        self._forgot_at = 0.0

    def start(self) -> None:
        """Announce the worker and start the loop (which announces it later if the database is away)."""
        try:
            with guarded():
                self._announce()
                self.check_health()  # before the first job: a group on a bad card takes none
        except Exception:  # noqa: BLE001 - the loop tries again; the reaper must run regardless
            log.warning("could not announce worker %s yet; will retry", self.worker_id, exc_info=True)
        self._thread.start()

    def _announce(self) -> None:
        with self.services.db.session() as session:
            announce_worker(
                session,
                worker_id=self.worker_id,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                devices=self.devices,
                models=self.models,
                info=self.info,
            )
        self._announced = True

    def stop(self) -> None:
        """Stop the loop and mark the worker stopped."""
        self._stop.set()
        self._thread.join(timeout=10)
        if self.cards is not None:
            self.cards.close()
        try:
            with self.services.db.session() as session:
                retire_worker(session, self.worker_id)
        except Exception:  # noqa: BLE001 - shutting down anyway
            log.warning("could not mark worker %s stopped", self.worker_id, exc_info=True)

    def run_once(self) -> None:
        """One round: presence, then the upkeep round (groups, reaper, dispatch)."""
        if not self._announced:
            self._announce()
        if self._health_read_at is None or (
            time.monotonic() - self._health_read_at >= self.services.settings.card_health_interval_seconds
        ):
            self.check_health()
        host = self._host_if_due()
        with self.services.db.session() as session:
            touch_worker(session, self.worker_id)
            if host is not None:
                refresh_host(session, self.worker_id, host)
            if time.monotonic() - self._forgot_at >= FORGET_EVERY_SECONDS:
                self._forgot_at = time.monotonic()
                forget_old_minutes(session)
        self.upkeep.run_once()

    def check_health(self) -> None:
        """Read the group's cards and record what they say (nothing to read: nothing changes)."""
        if self.cards is None or self.member is None:
            return
        self._health_read_at = time.monotonic()
        try:
            cards = self.cards.read()
        except Exception:  # noqa: BLE001 - a vendor tool that fails says nothing of the cards
            log.warning("could not read the health of %s's cards", self.worker_id, exc_info=True)
            return
        if cards is None:
            return
        problems = [
            f"{card.kind}:{card.index}: {problem}"
            for card in cards
            if not card.healthy
            for problem in card.problems or ("not healthy",)
        ]
        self.member.health(problems)

    def _host_if_due(self) -> dict[str, Any] | None:
        """The host inventory read again (cards' free memory for /metrics), once a minute, on hosts
        that have cards at all."""
        host = self.info.get("host")
        if not (isinstance(host, dict) and host.get("cards")):
            return None
        if time.monotonic() - self._cards_read_at < CARDS_EVERY_SECONDS:
            return None
        self._cards_read_at = time.monotonic()
        fresh = inventory()
        self.info["host"] = fresh
        return fresh

    def _loop(self) -> None:
        failing = False
        while not self._stop.wait(self.services.settings.reap_interval_seconds):
            try:
                with guarded():  # a pool child is never forked in the middle of this round
                    self.run_once()
            except Exception as exc:  # noqa: BLE001 - keep reaping through database or broker hiccups
                if not failing:  # the whole story once per outage, then one line per round
                    log.warning("maintenance round failed; retrying", exc_info=True)
                else:
                    log.debug("maintenance round failed again: %s", exc)
                failing = True
                continue
            if failing:
                log.info("maintenance rounds work again")
                failing = False
