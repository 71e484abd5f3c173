"""Previews while a job renders: publish the frames streamed so far, with their audio, at most
every ``preview_interval_seconds``.

The model's thread only says how many frames are out (``frames_out``, a counter and an event); a
thread of the publisher remuxes the encoder's MPEG-TS copy into an MP4 (``workers.video.preview``),
stores it as ``jobs/<id>/[attempt-<n>/]preview-<k>.mp4`` and hands the job row its record through
the heartbeat (``preview`` in the row's ``timings`` until the run ends; ``jobservice.jobs.previews``
reads it), so the API shows ``links.preview`` and the stream sends a ``preview`` event. The first
preview goes out as soon as the first frames are; later ones wait for the interval. Each preview is
a new key (a player still reading an earlier one is not cut off); the latest three are kept. A
preview that cannot be made or stored is logged and skipped: it never fails the job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobservice.db.tables import utcnow
from jobservice.jobs.previews import KEPT
from jobservice.media.probe import probe_media
from jobservice.storage import ObjectStore
from workers.video.preview import build_preview

log = logging.getLogger(__name__)


class PreviewPublisher:
    """Publishes one run's previews from the encoder's MPEG-TS copy, on its own thread."""

    def __init__(
        self,
        *,
        store: ObjectStore,
        key_of: Callable[[str], str],
        announce: Callable[[dict[str, Any]], None],
        folder: Path,
        interval: float,
        record: dict[str, Any],
        on_stored: Callable[[str], None] | None = None,
    ) -> None:
        """``key_of(name)``: the run's object key of a file; ``announce(record)``: hand the row the
        new preview (the heartbeat writes it); ``record``: what every record carries (attempt, try)."""
        self._store = store
        self._key_of = key_of
        self._announce = announce
        self._on_stored = on_stored
        self._folder = folder
        self._interval = interval
        self._base = dict(record)
        self.ts_path = folder / "preview.ts"
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._frames = 0  # frames out so far (the model's thread writes it)
        self.number = 0  # previews published
        self.published_frames = 0
        self.failures = 0
        self.build_ms: list[float] = []
        self.first_frames_at: float | None = None  # wall clock (time.time) of the first frames out
        self.first_published_at: float | None = None  # wall clock when the first preview was handed over
        self._keys: list[str] = []

    def start(self) -> None:
        """Begin publishing (the encoder writing ``ts_path`` has started)."""
        self._thread = threading.Thread(target=self._loop, name="preview", daemon=True)
        self._thread.start()

    def frames_out(self, frames: int) -> None:
        """``frames`` frames are in the encoder now (called by the model's thread; cheap)."""
        with self._lock:
            self._frames = frames
            if self.first_frames_at is None:
                self.first_frames_at = time.time()
        self._wake.set()

    def stop(self) -> None:
        """Publish no more (the last frame is out: the validated video comes next); returns at once,
        a preview being made is finished on its thread."""
        self._stop.set()
        self._wake.set()

    def close(self, timeout: float = 10.0) -> dict[str, Any]:
        """Stop publishing (generation ended, or the run failed), waiting for a preview being made;
        what the run's report keeps."""
        self.stop()
        if self._thread is not None:
            self._thread.join(timeout)
        return self.summary()

    def summary(self) -> dict[str, Any]:
        """The previews published, and how long after the first frames the first one was handed over."""
        delay = None
        if self.first_frames_at is not None and self.first_published_at is not None:
            delay = round((self.first_published_at - self.first_frames_at) * 1000, 1)
        return {
            "published": self.number,
            "interval_s": self._interval,
            "first_frames_at": self.first_frames_at,
            "first_published_at": self.first_published_at,
            "first_delay_ms": delay,
            "build_ms_mean": round(sum(self.build_ms) / len(self.build_ms), 1) if self.build_ms else None,
            "failures": self.failures,
        }

    def _loop(self) -> None:
        last = 0.0
        while not self._stop.is_set():
            self._wake.wait()
            if self.number and self._stop.wait(max(0.0, last + self._interval - time.monotonic())):
                return
            if self._stop.is_set():
                return
            self._wake.clear()
            with self._lock:
                frames = self._frames
            if frames <= self.published_frames:
                continue
            last = time.monotonic()
            try:
                self._publish(frames)
            except Exception as exc:  # noqa: BLE001 - a preview is a courtesy: never fail the job for one
                self.failures += 1
                log.warning("preview %d (%d frames) could not be published: %s", self.number + 1, frames, exc)

    def _publish(self, frames: int) -> None:
        number = self.number + 1
        name = f"preview-{number}.mp4"
        started = time.perf_counter()
        path = build_preview(self.ts_path, self._folder / name)
        # What it holds (the encoder went on while it was made): the MP4's header, read in a blink.
        facts = probe_media(path)
        self.build_ms.append(round((time.perf_counter() - started) * 1000, 1))
        key = self._key_of(name)
        try:
            self._store.put_file(key, path, content_type="video/mp4")
        finally:
            path.unlink(missing_ok=True)
        if self._on_stored is not None:
            self._on_stored(key)
        self._keys.append(key)
        self.number, self.published_frames = number, frames
        self._announce(
            {
                **self._base,
                "state": "ready",
                "number": number,
                "key": key,
                "frames": facts.video.nb_frames if facts.video is not None else None,
                "seconds": round(facts.duration_s, 3) if facts.duration_s is not None else None,
                "published_at": utcnow().isoformat(),
            }
        )
        if self.first_published_at is None:
            self.first_published_at = time.time()
        while len(self._keys) > KEPT:  # a player may still be reading one before the latest
            old = self._keys.pop(0)
            try:
                self._store.delete(old)
            except Exception as exc:  # noqa: BLE001 - retention deletes it with the job's files
                log.warning("an old preview %s could not be deleted: %s", old, exc)
