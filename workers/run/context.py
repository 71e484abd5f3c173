"""The pipeline's side of a run: what an adapter talks to while it generates.

Frames stream into the encoder (and, through it, the decode pass with the detectors) as they are
produced; progress goes to the heartbeat thread; cancels and timeouts surface at the adapter's
next ``check_cancel``. Telemetry (steps, chunks, stage timings) is collected for the RunReport.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from jobservice.catalog import ValidationPolicy
from jobservice.db.tables import Stage, utcnow
from jobservice.reports.run_report import ChunkTelemetry
from workers.adapters.base import AdapterError, JobCanceled, VideoFormat
from workers.run.heartbeat import Heartbeat
from workers.run.preview import PreviewPublisher
from workers.video.encoder import EncoderError, EncodeResult, StreamingEncoder

# Progress of the whole job: fetch/load take the first slice, the model most of it, the tail the rest.
GENERATE_FROM, GENERATE_TO = 0.05, 0.95


class LeaseLostError(Exception):
    """The reaper gave this job to another worker; stop without writing anything."""


def to_uint8_frames(frames: Any) -> np.ndarray:
    """Frames as a C-contiguous uint8 array [N, H, W, 3], whatever device they were made on."""
    if hasattr(frames, "detach"):  # a torch tensor: copy to host without importing torch here
        frames = frames.detach().to("cpu").contiguous().numpy()
    array = np.asarray(frames)
    if array.ndim == 3:
        array = array[None, ...]
    if array.ndim != 4 or array.shape[-1] != 3:
        raise AdapterError("model_error", f"the model produced frames shaped {array.shape}, not [N, H, W, 3]")
    if array.dtype != np.uint8:
        raise AdapterError("model_error", f"the model produced {array.dtype} frames, not uint8")
    return np.ascontiguousarray(array)


def _encoder_problem(exc: EncoderError) -> str:
    """What went wrong in ffmpeg, without this worker's scratch paths."""
    text = str(exc)
    for marker in ("/scratch/", "/tmp/"):
        while marker in text:
            start = text.rfind(" ", 0, text.index(marker)) + 1
            end = text.find(":", text.index(marker))
            text = text[:start] + "<file>" + (text[end:] if end != -1 else "")
    return f"Encoding the video failed: {text}"


class PipelineContext:
    """Implements the adapters' RunContext on top of the encoder and the heartbeat."""

    def __init__(
        self,
        *,
        heartbeat: Heartbeat,
        scratch: Path,
        policy: ValidationPolicy,
        hash_frames: bool = False,
        on_loading: Callable[[], AbstractContextManager[None]] | None = None,
        preview: PreviewPublisher | None = None,
    ) -> None:
        self._heartbeat = heartbeat
        self.preview = preview  # publishes the frames so far while the model renders (workers/run/preview.py)
        self._on_loading = on_loading
        # Per-frame digests of the raw frames (batch jobs): deterministic outputs compare exactly.
        self.frame_hashes: list[str] | None = [] if hash_frames else None
        self._scratch = scratch
        self._policy = policy
        self.encoder: StreamingEncoder | None = None
        self.format: VideoFormat | None = None
        self.frames_emitted = 0
        self.first_frame_at: datetime | None = None
        self.last_frame_at: datetime | None = None
        self.last_frame_clock: float | None = None
        self.step_ms: list[float] = []
        self.chunks: list[ChunkTelemetry] = []
        # Reported by adapters of external systems (logs, server memory, facts, cold starts).
        self.log_path = scratch / "job.log"
        self.memory: dict[str, float] = {}
        self.extra: dict[str, Any] = {}
        self.cold_start: bool | None = None
        self.timings: dict[str, float] = {}
        self.write_ms = 0.0

    @property
    def output_path(self) -> Path:
        """Where the streamed MP4 is written."""
        return self._scratch / "output.mp4"

    def start_video(self, fmt: VideoFormat) -> None:
        """Open the encoder for ``fmt`` (once per run)."""
        if self.encoder is not None:
            raise AdapterError("model_error", "the model announced its video format twice")
        if fmt.width % 2 or fmt.height % 2 or fmt.width <= 0 or fmt.height <= 0:
            raise AdapterError("model_error", f"cannot encode {fmt.width}x{fmt.height}: sides must be even")
        self.format = fmt
        self.encoder = StreamingEncoder(
            out_path=self.output_path,
            width=fmt.width,
            height=fmt.height,
            fps=fmt.fps,
            policy=self._policy,
            audio_path=fmt.audio_path,
            duration_s=fmt.num_frames / fmt.fps,
            preview_path=self.preview.ts_path if self.preview is not None else None,
        )
        if self.preview is not None:
            self.preview.start()

    def emit_frames(self, frames: Any) -> None:
        """Send frames to the encoder as soon as they exist."""
        if self.encoder is None or self.format is None:
            raise AdapterError("model_error", "the model emitted frames before announcing the video format")
        array = to_uint8_frames(frames)
        if array.shape[1:3] != (self.format.height, self.format.width):
            raise AdapterError(
                "model_error",
                f"frames are {array.shape[2]}x{array.shape[1]}, "
                f"the announced size is {self.format.width}x{self.format.height}",
            )
        if self.frame_hashes is not None:
            self.frame_hashes.extend(hashlib.sha256(memoryview(f)).hexdigest()[:16] for f in array)
        started = time.perf_counter()
        try:
            self.encoder.write(array)
        except EncoderError as exc:
            raise AdapterError("encode_failed", _encoder_problem(exc)) from exc
        self.write_ms += (time.perf_counter() - started) * 1000
        now = utcnow()
        if self.first_frame_at is None:
            self.first_frame_at = now
        self.last_frame_at = now
        self.last_frame_clock = time.perf_counter()
        self.frames_emitted += len(array)
        if self.preview is not None:
            self.preview.frames_out(self.frames_emitted)

    def progress(self, fraction: float, stage: str | None = None) -> None:
        """Map the model's 0..1 onto the job's progress bar."""
        fraction = min(1.0, max(0.0, float(fraction)))
        self._heartbeat.update(progress=GENERATE_FROM + (GENERATE_TO - GENERATE_FROM) * fraction)

    def check_cancel(self) -> None:
        """Raise at a boundary when the job was canceled, timed out, given away, or its lease is
        running out unrenewed."""
        self._heartbeat.give_up_if_overdue()
        if not self._heartbeat.stop_requested.is_set():
            return
        reason = self._heartbeat.stop_reason or "canceled"
        if reason == "lease_lost":
            raise LeaseLostError()
        raise JobCanceled(reason)

    def record_step(self, ms: float) -> None:
        """Per denoising step."""
        self.step_ms.append(round(float(ms), 3))

    def record_chunk(self, chunk: ChunkTelemetry) -> None:
        """Per generated chunk."""
        self.chunks.append(chunk)

    def add_timing(self, name: str, ms: float) -> None:
        """An adapter-specific stage timing."""
        key = name if name.endswith("_ms") else f"{name}_ms"
        self.timings[key] = round(self.timings.get(key, 0.0) + float(ms), 3)

    def job_log(self) -> Path:
        """The run's log file (the pipeline stores it as jobs/<id>/log.txt)."""
        return self.log_path

    def add_memory(self, name: str, mb: float) -> None:
        """A memory figure for the report's ``memory`` block."""
        self.memory[name] = round(float(mb), 1)

    def add_extra(self, key: str, value: Any) -> None:
        """Adapter-specific facts for the report's ``extra``."""
        self.extra[key] = value

    def set_cold_start(self, cold: bool) -> None:
        """Override the worker's own idea of a cold start for this run."""
        self.cold_start = bool(cold)

    def loading(self) -> AbstractContextManager[None]:
        """A load inside the run: it is a cold start, timed as ``load_ms``, and the card group's
        ledger and measured load time see it (``on_loading``, set by the pipeline)."""
        return self._loading()

    @contextlib.contextmanager
    def _loading(self) -> Iterator[None]:
        started = time.perf_counter()
        with self._on_loading() if self._on_loading is not None else contextlib.nullcontext():
            yield
        self.cold_start = True
        self.add_timing("load_ms", (time.perf_counter() - started) * 1000)

    def finish_encoding(self) -> EncodeResult:
        """Flush the encoder and the decode pass after the last frame."""
        if self.encoder is None:
            raise AdapterError("model_error", "the model returned without producing any video")
        self._heartbeat.update(stage=Stage.ENCODING.value)
        self.close_preview()  # the validated video replaces it
        try:
            return self.encoder.finish()
        except EncoderError as exc:
            raise AdapterError("encode_failed", _encoder_problem(exc)) from exc

    def close_preview(self) -> None:
        """Stop publishing previews (once); the report's ``extra.preview`` says what was published."""
        if self.preview is not None:
            preview, self.preview = self.preview, None
            summary = preview.close()
            if summary["published"] or summary["failures"]:
                self.extra["preview"] = summary

    def abort(self) -> None:
        """Stop the encoder and drop partial output (cancel, failure)."""
        self.close_preview()
        if self.encoder is not None:
            self.encoder.abort()
