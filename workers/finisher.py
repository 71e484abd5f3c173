"""Finishing one job while the card generates the next.

After a job's last frame the card has nothing left to do for it: the encoder's flush, the output
gate (ffprobe, the detectors, the decoded-frame and audio checks), the upload, the report and the
final transition are CPU and I/O work. Done in line, they kept the card idle between jobs (duty
cycle 0.92 for 20 small queued jobs, scripts/bench_overhead.py). The Celery task therefore hands
a generated job to this process's finisher and returns, so the next message is claimed and
generated while the previous job is finished here.

One job finishes at a time: a task that hands over while the previous job is still finishing
waits for it first, so a slow gate or store holds the queue back instead of piling up outputs.

Finishing is CPU work (ffmpeg's decode and detectors, an encoder flush) on the host that generates
the next job. A job being measured (a regression batch's) therefore waits for the finisher to be
idle before it starts (``drain``); since only the task thread hands work over, nothing of this
worker finishes beside its generation. The finisher also remembers when it was busy
(``busy_between``), so every run's report can say how much finishing ran beside it.
The job being finished keeps its heartbeat and lease until its final transition, so a worker
that dies here loses nothing: the reaper requeues the job when its lease runs out, as for a
worker that died generating. A stopping worker process drains the finisher first
(``WorkerProcess.on_child_stop``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)


class Finisher:
    """One background thread that runs hand-overs one at a time, in order."""

    def __init__(self, name: str = "jobservice-finisher") -> None:
        self._name = name
        self._lock = threading.Condition()
        self._pending: Callable[[], object] | None = None
        self._busy = False
        self._thread: threading.Thread | None = None
        self._busy_since: float | None = None  # perf_counter of the hand-over being finished
        self._spans: deque[tuple[float, float]] = deque(maxlen=64)  # recent (start, end) of finishing

    def hand_over(self, work: Callable[[], object]) -> None:
        """Run ``work`` on the finisher thread; waits while a previous hand-over is not done."""
        with self._lock:
            self._lock.wait_for(self._done)
            self._pending = work
            self._ensure_thread()
            self._lock.notify_all()

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until everything handed over has finished; False if ``timeout`` passed first."""
        with self._lock:
            return self._lock.wait_for(self._done, timeout)

    @property
    def idle(self) -> bool:
        """Whether nothing is waiting or finishing."""
        with self._lock:
            return self._done()

    def busy_between(self, start: float, end: float) -> tuple[int, float]:
        """Hand-overs finished (or finishing) between two ``time.perf_counter`` readings: how many
        overlapped the window, and for how many seconds in all."""
        with self._lock:
            spans = list(self._spans)
            if self._busy_since is not None:
                spans.append((self._busy_since, time.perf_counter()))
        overlaps = [min(end, b) - max(start, a) for a, b in spans if b > start and a < end]
        return len(overlaps), sum(overlaps)

    def _done(self) -> bool:  # with the lock held
        return self._pending is None and not self._busy

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._pending is not None)
                work, self._pending = self._pending, None
                self._busy = True
                self._busy_since = time.perf_counter()
            try:
                assert work is not None
                work()
            except BaseException:  # noqa: BLE001 - the work records its own failures; keep the thread
                log.exception("finishing a job failed unexpectedly")
            finally:
                with self._lock:
                    if self._busy_since is not None:
                        self._spans.append((self._busy_since, time.perf_counter()))
                    self._busy, self._busy_since = False, None
                    self._lock.notify_all()
