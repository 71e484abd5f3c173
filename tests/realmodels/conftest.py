"""Fixtures of the real-model adapter tests: a RunContext that records everything, and inputs."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jobservice.reports.run_report import ChunkTelemetry
from workers.adapters.base import JobCanceled, JobInputs, VideoFormat

ROOT = Path(__file__).resolve().parents[2]


class RecordingContext:
    """The RunContext protocol, recording what an adapter reports; ``cancel_when`` decides cancels."""

    def __init__(self, scratch: Path, cancel_when: Callable[[RecordingContext], bool] | None = None) -> None:
        self.scratch = scratch
        self.cancel_when = cancel_when
        self.format: VideoFormat | None = None
        self.frames: list[np.ndarray] = []
        self.progress_log: list[float] = []
        self.steps: list[float] = []
        self.chunks: list[ChunkTelemetry] = []
        self.timings: dict[str, float] = {}
        self.memory: dict[str, float] = {}
        self.extra: dict[str, Any] = {}
        self.cold_start: bool | None = None
        self.log_path = scratch / "job.log"

    def start_video(self, fmt: VideoFormat) -> None:
        assert self.format is None
        self.format = fmt

    def emit_frames(self, frames: Any) -> None:
        assert self.format is not None
        array = np.asarray(frames)
        assert array.dtype == np.uint8 and array.shape[1:] == (self.format.height, self.format.width, 3)
        self.frames.append(array)

    def progress(self, fraction: float, stage: str | None = None) -> None:
        assert 0.0 <= fraction <= 1.0
        self.progress_log.append(fraction)

    def check_cancel(self) -> None:
        if self.cancel_when is not None and self.cancel_when(self):
            raise JobCanceled("canceled")

    def record_step(self, ms: float) -> None:
        self.steps.append(ms)

    def record_chunk(self, chunk: ChunkTelemetry) -> None:
        self.chunks.append(chunk)

    def add_timing(self, name: str, ms: float) -> None:
        self.timings[name if name.endswith("_ms") else f"{name}_ms"] = ms

    def job_log(self) -> Path:
        return self.log_path

    def add_memory(self, name: str, mb: float) -> None:
        self.memory[name] = mb

    def add_extra(self, key: str, value: Any) -> None:
        self.extra[key] = value

    def set_cold_start(self, cold: bool) -> None:
        self.cold_start = cold

    @property
    def frame_count(self) -> int:
        return sum(len(f) for f in self.frames)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture
def ctx(tmp_path: Path) -> RecordingContext:
    """A recording context with its own scratch folder."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    return RecordingContext(scratch)


@pytest.fixture(scope="session")
def speech_2s(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 2 s of the sample speech (16 kHz mono WAV)."""
    out = tmp_path_factory.mktemp("speech") / "speech2s.wav"
    subprocess.run(
        [shutil.which("ffmpeg") or "ffmpeg", "-v", "error", "-y", "-i", str(ROOT / "samples" / "speech.wav")]
        + ["-t", "2", "-ac", "1", "-ar", "16000", str(out)],
        check=True,
    )
    return out


@pytest.fixture
def job_inputs(ctx: RecordingContext, speech_2s: Path) -> Callable[..., JobInputs]:
    """JobInputs with the sample portrait and 2 s of speech."""

    def build(model: str, params: dict[str, Any], *, files: bool = True) -> JobInputs:
        inputs = {"image": ROOT / "samples" / "portrait.png", "audio": speech_2s} if files else {}
        return JobInputs(job_id="job-1", model=model, params=params, files=inputs, scratch=ctx.scratch)

    return build


def deployed_spec(tmp_path: Path, model_id: str, entry: dict[str, Any]) -> Any:
    """The catalog spec a deployment file with this one entry yields."""
    from jobservice.backends.deployment import load_deployment
    from tests.standins.deploy import write_deployment

    path = write_deployment(tmp_path / f"deploy-{model_id}.yaml", {"models": {model_id: entry}})
    return next(s for s in load_deployment(path).specs() if s.id == model_id)


def fh_params(**overrides: Any) -> dict[str, Any]:
    """FlashHead parameters as the API resolves them (the quality profile by default)."""
    from jobservice.backends.flashhead import FlashHeadParams

    return FlashHeadParams.model_validate(overrides).model_dump(mode="json")
