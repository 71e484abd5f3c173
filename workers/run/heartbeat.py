"""A running job's heartbeat: extends the lease, writes progress, and notices cancels and timeouts.

It runs on its own thread so the model's thread never waits on the database. Progress is written
at most every ``progress_min_interval_seconds`` and the lease at least every ``heartbeat_seconds``.
When the job is canceled, runs past its deadline, or the lease is lost (the reaper gave the job
to someone else), an event is set that ``check_cancel`` turns into an exception at the model's
next step or chunk boundary.

A lease that cannot be renewed (the database is unreachable) is given up before it runs out: when
the next beat would come later than ``lease_seconds - heartbeat_seconds`` after the last renewal,
the run stops as ``lease_lost``, so the reaper can hand the job to another attempt without two
copies of it running on the cards. The model's thread checks the same clock at each
``check_cancel`` (``give_up_if_overdue``), so a heartbeat stuck in a database call that hangs
cannot keep the run going either. ``lease_held`` tells the final write how long it may retry.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

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
        # The lease the database holds for us runs to about renewed + lease_seconds; stop short of it.
        self._renewed = time.monotonic()
        self._margin = min(beat_seconds, lease_seconds / 2)
        self._lost = False
        self._failing_since: float | None = None  # first failed beat of the current outage
        self.finishing = threading.Event()  # set by the pipeline around its final write
        self._lock = threading.Lock()
        self._stage: str | None = None
        self._progress: float | None = None
        self._preview: dict[str, Any] | None = None  # a preview record not written yet
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

    def update(
        self,
        *,
        stage: str | None = None,
        progress: float | None = None,
        preview: dict[str, Any] | None = None,
        flush: bool = False,
    ) -> None:
        """Record the latest stage/progress (and preview record, ``jobservice.jobs.previews``);
        written soon by the heartbeat thread."""
        with self._lock:
            if stage is not None:
                self._stage = stage
            if progress is not None:
                self._progress = progress
            if preview is not None:
                self._preview = preview
        if stage is not None or progress is not None or preview is not None or flush:
            self._dirty.set()

    def lease_held(self, *, at: float | None = None) -> bool:
        """Whether this run still surely holds its lease (renewed recently enough, not lost),
        now or at the monotonic time ``at``."""
        moment = time.monotonic() if at is None else at
        return not self._lost and moment < self._renewed + self._lease_seconds - self._margin

    def give_up_if_overdue(self) -> None:
        """Stop the run as ``lease_lost`` when the lease will not be renewed in time (called from the
        model's thread, in case the heartbeat thread hangs in a database call)."""
        if not self._lost and not self.lease_held():
            log.error("job %s: the lease was not renewed in time; stopping the run", self._job_id)
            self._lose()

    def _lose(self) -> None:
        self._lost = True
        self._request_stop("lease_lost")

    def _request_stop(self, reason: str) -> None:
        if not self.stop_requested.is_set():
            self.stop_reason = reason
            self.stop_requested.set()

    def _loop(self) -> None:
        last_write = 0.0
        while not self._stopping.is_set():
            # Wake on new progress or at the beat, whichever comes first...
            self._dirty.wait(timeout=self._beat_seconds)
            # ...but never write more often than the progress interval (a preview record goes at
            # once: the run hands one over at most every preview interval, seconds apart).
            with self._lock:
                preview_due = self._preview is not None
            pause = 0.0 if preview_due else last_write + self._progress_interval - time.monotonic()
            if pause > 0 and self._stopping.wait(pause):
                break
            if self._stopping.is_set():
                break
            self._dirty.clear()
            if time.monotonic() >= self._deadline:
                self._request_stop("timeout")
            last_write = time.monotonic()
            if not self._beat():
                return

    def _beat(self) -> bool:
        """Renew the lease once; False when the run must stop beating (the lease is gone)."""
        with self._lock:
            stage, progress, preview = self._stage, self._progress, self._preview
            self._preview = None  # written once; put back below if this write fails
        started = time.monotonic()
        try:
            with self._db.session() as session:
                beat = heartbeat(
                    session,
                    self._job_id,
                    owner=self._owner,
                    lease_seconds=self._lease_seconds,
                    stage=stage,
                    progress=progress,
                    preview=preview,
                )
        except Exception as exc:  # noqa: BLE001 - a database hiccup must not kill the run; retry next beat
            with self._lock:
                if self._preview is None:
                    self._preview = preview
            if self.lease_held(at=time.monotonic() + self._beat_seconds):  # still ours at the next beat
                if self._failing_since is None:  # once per outage, not at every beat
                    self._failing_since = started
                    log.warning("job %s: heartbeat failed (%s); retrying", self._job_id, exc)
                return True
            log.error(
                "job %s: the lease could not be renewed for %.0f s; stopping the run so that the job "
                "can be requeued",
                self._job_id,
                time.monotonic() - self._renewed,
            )
            self._lose()
            return False
        if not beat.owned:
            if not self.finishing.is_set():  # else the final write just moved it: not a loss
                log.warning("job %s: lease lost (the job was requeued or finished elsewhere)", self._job_id)
            self._lose()
            return False
        if self._failing_since is not None:
            log.info("job %s: heartbeat back after %.1f s", self._job_id, started - self._failing_since)
            self._failing_since = None
        self._renewed = started  # the database's expiry counts from before this write at the latest
        if beat.cancel_requested:
            self._request_stop("canceled")
        return True
