"""The one fake RunContext of the adapter tests: it records everything an adapter reports.

It implements the ``RunContext`` protocol (``workers.adapters.base``) as the pipeline's context
does, minus the encoder: frames are kept in memory for the test to look at. Cancels come from
``cancel_after`` (the n-th ``check_cancel`` call, 1-based) or ``cancel_when`` (a predicate).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from jobservice.reports.run_report import ChunkTelemetry
from workers.adapters.base import JobCanceled, VideoFormat


class RecordingContext:
    """A RunContext that records what an adapter reports (see the module docstring)."""

    def __init__(
        self,
        scratch: Path,
        *,
        cancel_after: int | None = None,
        cancel_when: Callable[[RecordingContext], bool] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.scratch = scratch
        self.cancel_after = cancel_after
        self.cancel_when = cancel_when
        self.log_path = log_path or scratch / "job.log"
        self.format: VideoFormat | None = None
        self.emitted: list[np.ndarray] = []  # one array per emit_frames call
        self.progress_log: list[tuple[float, str | None]] = []
        self.steps: list[float] = []
        self.chunks: list[ChunkTelemetry] = []
        self.timings: dict[str, float] = {}
        self.memory: dict[str, float] = {}
        self.extra: dict[str, Any] = {}
        self.cold_start: bool | None = None
        self.cancel_checks = 0

    # --- the RunContext protocol -------------------------------------------------------------
    def start_video(self, fmt: VideoFormat) -> None:
        assert self.format is None, "start_video called twice"
        self.format = fmt

    def emit_frames(self, frames: Any) -> None:
        assert self.format is not None, "emit_frames before start_video"
        array = frames.cpu().numpy() if hasattr(frames, "cpu") else np.asarray(frames)
        if array.ndim == 3:
            array = array[np.newaxis]
        assert array.dtype == np.uint8 and array.ndim == 4, (array.dtype, array.shape)
        assert array.shape[1:] == (self.format.height, self.format.width, 3), array.shape
        self.emitted.append(array)

    def progress(self, fraction: float, stage: str | None = None) -> None:
        assert 0.0 <= fraction <= 1.0 + 1e-9, fraction
        self.progress_log.append((fraction, stage))

    def check_cancel(self) -> None:
        self.cancel_checks += 1
        if self.cancel_after is not None and self.cancel_checks >= self.cancel_after:
            raise JobCanceled("canceled")
        if self.cancel_when is not None and self.cancel_when(self):
            raise JobCanceled("canceled")

    def record_step(self, ms: float) -> None:
        self.steps.append(ms)

    def record_chunk(self, chunk: ChunkTelemetry) -> None:
        self.chunks.append(chunk)

    def add_timing(self, name: str, ms: float) -> None:
        key = name if name.endswith("_ms") else f"{name}_ms"  # as the pipeline's context does
        self.timings[key] = round(self.timings.get(key, 0.0) + float(ms), 3)

    def job_log(self) -> Path:
        return self.log_path

    def add_memory(self, name: str, mb: float) -> None:
        self.memory[name] = mb

    def add_extra(self, key: str, value: Any) -> None:
        self.extra[key] = value

    def set_cold_start(self, cold: bool) -> None:
        self.cold_start = cold

    def loading(self) -> AbstractContextManager[None]:
        """A load inside the run: recorded as a cold start."""
        self.cold_start = True
        return contextlib.nullcontext()

    # --- what tests read -----------------------------------------------------------------------
    @property
    def frames(self) -> np.ndarray:
        """Every emitted frame, [N, H, W, 3] uint8."""
        return np.concatenate(self.emitted) if self.emitted else np.zeros((0, 0, 0, 3), np.uint8)

    @property
    def frame_count(self) -> int:
        return sum(len(chunk) for chunk in self.emitted)

    @property
    def fractions(self) -> list[float]:
        """The progress fractions reported, in order."""
        return [fraction for fraction, _ in self.progress_log]

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
