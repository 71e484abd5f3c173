"""A running job's heartbeat: extends the lease, writes progress, and notices cancels and timeouts.

It runs on its own thread so the model's thread never waits on the database. Progress is written
at most every ``progress_min_interval_seconds`` and the lease at least every ``heartbeat_seconds``.
When the job is canceled, runs past its deadline, or the lease is lost (the reaper gave the job
to someone else), an event is set that ``check_cancel`` turns into an exception at the model's
next step or chunk boundary.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

from jobservice.db.engine import Database
from jobservice.jobs.leases import Owner, heartbeat

log = logging.getLogger(__name__)


class Heartbeat:
    """Lease, progress and cancel bookkeeping for one run."""

    def __init__(
        self,
        db: Database,
        job_id: uuid.UUID,
        owner: Owner,
        *,
        lease_seconds: float,
        beat_seconds: float,
        progress_interval: float,
        deadline_seconds: float,
    ) -> None:
        self._db = db
        self._job_id = job_id
        self._owner = owner
        self._lease_seconds = lease_seconds
        self._beat_seconds = beat_seconds
        self._progress_interval = progress_interval
        self._deadline = time.monotonic() + deadline_seconds
        self._lock = threading.Lock()
        self._stage: str | None = None
        self._progress: float | None = None
        self._dirty = threading.Event()
        self._stopping = threading.Event()
        self.stop_requested = threading.Event()
        self.stop_reason: str | None = None  # "canceled", "timeout" or "lease_lost"
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{job_id}", daemon=True)

    def start(self) -> None:
        """Begin beating."""
        self._thread.start()

    def stop(self) -> None:
        """Stop beating (the final status write is the pipeline's)."""
        self._stopping.set()
        self._dirty.set()
        self._thread.join(timeout=max(5.0, self._beat_seconds * 2))

    def update(self, *, stage: str | None = None, progress: float | None = None, flush: bool = False) -> None:
        """Record the latest stage/progress; written soon by the heartbeat thread."""
        with self._lock:
            if stage is not None:
                self._stage = stage
            if progress is not None:
                self._progress = progress
        if stage is not None or progress is not None or flush:
            self._dirty.set()

    def _request_stop(self, reason: str) -> None:
        if not self.stop_requested.is_set():
            self.stop_reason = reason
            self.stop_requested.set()

    def _loop(self) -> None:
        last_write = 0.0
        while not self._stopping.is_set():
            # Wake on new progress or at the beat, whichever comes first...
            self._dirty.wait(timeout=self._beat_seconds)
            # ...but never write more often than the progress interval.
            pause = last_write + self._progress_interval - time.monotonic()
            if pause > 0 and self._stopping.wait(pause):
                break
            if self._stopping.is_set():
                break
            self._dirty.clear()
            if time.monotonic() >= self._deadline:
                self._request_stop("timeout")
            with self._lock:
                stage, progress = self._stage, self._progress
            last_write = time.monotonic()
            try:
                with self._db.session() as session:
                    beat = heartbeat(
                        session,
                        self._job_id,
                        owner=self._owner,
                        lease_seconds=self._lease_seconds,
                        stage=stage,
                        progress=progress,
                    )
            except Exception:  # noqa: BLE001 - a database hiccup must not kill the run; retry next beat
                log.warning("job %s: heartbeat failed; retrying", self._job_id, exc_info=True)
                continue
            if not beat.owned:
                log.warning("job %s: lease lost (the job was requeued or finished elsewhere)", self._job_id)
                self._request_stop("lease_lost")
                return
            if beat.cancel_requested:
                self._request_stop("canceled")
