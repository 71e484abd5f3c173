"""The adapter contract: how a worker drives one model.

``load(device)`` runs once per worker process and returns a handle that stays resident;
``run(handle, inputs, ctx)`` produces one video. An adapter either streams frames through
``ctx`` (the pipeline encodes and checks them while they are produced) or hands back a finished
video file (external systems that write their own MP4). Heavy imports (torch, cv2) happen inside
adapter modules only; an adapter whose imports fail is listed as unavailable, not a crash.
"""

from __future__ import annotations

import abc
import contextlib
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from jobservice.fleet.placement import DeviceContext
from jobservice.reports.run_report import ChunkTelemetry

__all__ = [
    "Adapter",
    "AdapterError",
    "DeviceContext",
    "JobCanceled",
    "JobInputs",
    "RunContext",
    "RunOutput",
    "VideoFormat",
]


class JobCanceled(Exception):
    """Raised at a step or chunk boundary when the job was canceled or ran out of time."""

    def __init__(self, reason: str = "canceled") -> None:
        super().__init__(reason)
        self.reason = reason  # "canceled" or "timeout"


class AdapterError(Exception):
    """A run failed for a reason the user should see, with a machine-readable code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class JobInputs:
    """What a run works from: resolved parameters and local copies of the inputs."""

    job_id: str
    model: str
    params: dict[str, Any]
    files: dict[str, Path]  # e.g. {"image": ..., "audio": ...}
    scratch: Path  # a private folder for this run
    # What the API learned when it checked each input, e.g. meta["audio"]["duration_s"],
    # meta["image"]["width"]: adapters need not probe the inputs again.
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class VideoFormat:
    """What the adapter is about to stream; fixes the encoder and the gate's expectations."""

    width: int
    height: int
    fps: float
    num_frames: int
    audio_path: Path | None = None  # muxed as AAC when given (audio2video)
    # What the gate compares the duration with when the video deliberately covers less than the
    # whole input audio (e.g. a benchmark capped at max_chunks); None: the input audio's duration.
    expected_duration_s: float | None = None


@dataclass
class RunOutput:
    """What ``run`` returns."""

    frames_generated: int
    media_duration_s: float
    video_path: Path | None = None  # set only by adapters that write their own file
    expected: VideoFormat | None = None  # with video_path: what the file should be
    extra: dict[str, Any] = field(default_factory=dict)


class RunContext(Protocol):
    """The pipeline's side of a run, handed to ``Adapter.run``."""

    def start_video(self, fmt: VideoFormat) -> None:
        """Announce the output format; must precede the first ``emit_frames``."""

    def emit_frames(self, frames: Any) -> None:
        """Append frames: a uint8 array (or tensor on any device) shaped [N, H, W, 3], RGB."""

    def progress(self, fraction: float, stage: str | None = None) -> None:
        """Report progress in 0..1 of this run (cheap; throttled by the pipeline)."""

    def check_cancel(self) -> None:
        """Raise JobCanceled if the job was canceled or timed out. Call at every step/chunk."""

    def record_step(self, ms: float) -> None:
        """Record the duration of one denoising step."""

    def record_chunk(self, chunk: ChunkTelemetry) -> None:
        """Record the telemetry of one generated chunk."""

    def add_timing(self, name: str, ms: float) -> None:
        """Record an adapter-specific stage timing (``<name>`` should end in ``_ms``)."""

    def job_log(self) -> Path:
        """This run's log file: append a child's stdout/stderr here. Stored as ``jobs/<id>/log.txt``
        whether the run succeeds or fails."""

    def add_memory(self, name: str, mb: float) -> None:
        """Record a memory figure for the report, e.g. an external server's ``peak_mb``."""

    def add_extra(self, key: str, value: Any) -> None:
        """Record adapter-specific facts in the report's ``extra`` (kept when the run fails too)."""

    def set_cold_start(self, cold: bool) -> None:
        """Say whether this run paid the model's load, when the adapter knows better than the worker
        (a script that loads the model per job; a resident pipeline started for this job)."""

    def loading(self) -> AbstractContextManager[None]:
        """Wrap a load the adapter does inside ``run`` (a resident child started for this job): the
        card group's ledger shows it as loading, and its time is the model's measured load."""
        return contextlib.nullcontext()


class Adapter(abc.ABC):
    """One model family's driver. Subclasses set ``model_ids`` and implement load/run."""

    model_ids: ClassVar[tuple[str, ...]] = ()
    execution_mode: ClassVar[str] = "resident"
    # True when ``load`` only prepares and the model loads inside ``run`` (in ``ctx.loading()``):
    # the worker then records the run's load, not ``load``'s.
    loads_in_run: ClassVar[bool] = False

    @abc.abstractmethod
    def load(self, device: DeviceContext, params: dict[str, Any] | None = None) -> Any:
        """Load the model onto ``device`` and return a resident handle."""

    @abc.abstractmethod
    def run(self, handle: Any, inputs: JobInputs, ctx: RunContext) -> RunOutput:
        """Produce one video for ``inputs``, streaming frames through ``ctx`` or returning a file."""

    def unload(self, handle: Any) -> None:  # noqa: B027 - optional hook
        """Release a handle (called when a worker evicts or shuts down)."""
