"""The worker's dispatcher: runs a dispatch round the moment the bell rings.

Requests never run dispatch rounds (``jobservice.fleet.wake``): they record the work and ring. This
thread of the worker's main process waits on the bell and runs the round when it takes the token
(one worker of the fleet does), under the fork guard like every database call of the main process.
A round failure, or a broker that does not answer, is logged and waited out: the maintenance
thread's rounds (``workers.maintenance``) dispatch every few seconds regardless.
"""

from __future__ import annotations

import logging
import threading

from jobservice.fleet.dispatch import dispatch_round
from jobservice.wiring import Services
from workers.forkguard import guarded

log = logging.getLogger(__name__)

WAIT_SECONDS = 2.0  # one blocking wait on the bell; the thread checks whether to stop between waits
RETRY_SECONDS = 1.0  # after a failure (the broker away): wait before listening again


class Dispatcher:
    """Waits on the dispatch bell on a daemon thread and runs a round whenever it rings."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.bell = services.dispatch_bell
        self.rounds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="jobservice-dispatcher", daemon=True)

    def start(self) -> None:
        """Start listening."""
        self._thread.start()

    def stop(self) -> None:
        """Stop listening (within one wait)."""
        self._stop.set()
        self._thread.join(timeout=WAIT_SECONDS + 3)
        self.bell.close()

    def run_once(self, *, wait_seconds: float = WAIT_SECONDS) -> bool:
        """Wait for the bell once; when it rang, run a round. True when a round ran."""
        if not self.bell.wait(wait_seconds):
            return False
        with guarded():  # no pool child is forked in the middle of the round
            dispatch_round(self.services)
        self.rounds += 1
        return True

    def _loop(self) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as exc:  # noqa: BLE001 - the maintenance rounds dispatch meanwhile
                if not failing:
                    log.warning("the dispatcher could not wait or dispatch; retrying", exc_info=True)
                else:
                    log.debug("the dispatcher failed again: %s", exc)
                failing = True
                self._stop.wait(RETRY_SECONDS)
                continue
            if failing:
                log.info("the dispatcher works again")
                failing = False
