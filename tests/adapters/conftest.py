"""Fixtures of the reference-model adapter tests: a fake RunContext and small media inputs."""

from __future__ import annotations

import shutil
import subprocess
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jobservice.reports.run_report import ChunkTelemetry
from workers.adapters.base import JobCanceled, JobInputs, VideoFormat

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"


class FakeRunContext:
    """Implements the RunContext protocol by recording everything the adapter reports.

    ``cancel_after``: raise JobCanceled on that many-th ``check_cancel`` call (1-based).
    """

    def __init__(self, cancel_after: int | None = None, log_path: Path | None = None) -> None:
        self.cancel_after = cancel_after
        self.log_path = log_path
        self.memory: dict[str, float] = {}
        self.extra: dict[str, Any] = {}
        self.cold_start: bool | None = None
        self.format: VideoFormat | None = None
        self.chunks_of_frames: list[np.ndarray] = []
        self.progress_log: list[tuple[float, str | None]] = []
        self.steps: list[float] = []
        self.chunks: list[ChunkTelemetry] = []
        self.timings: dict[str, float] = {}
        self.cancel_checks = 0

    def start_video(self, fmt: VideoFormat) -> None:
        assert self.format is None, "start_video called twice"
        self.format = fmt

    def emit_frames(self, frames: Any) -> None:
        assert self.format is not None, "emit_frames before start_video"
        array = frames.cpu().numpy() if hasattr(frames, "cpu") else np.asarray(frames)
        assert array.dtype == np.uint8 and array.ndim == 4 and array.shape[3] == 3, array.shape
        self.chunks_of_frames.append(array)

    def progress(self, fraction: float, stage: str | None = None) -> None:
        assert 0.0 <= fraction <= 1.0 + 1e-9
        self.progress_log.append((fraction, stage))

    def check_cancel(self) -> None:
        self.cancel_checks += 1
        if self.cancel_after is not None and self.cancel_checks >= self.cancel_after:
            raise JobCanceled("canceled")

    def record_step(self, ms: float) -> None:
        self.steps.append(ms)

    def record_chunk(self, chunk: ChunkTelemetry) -> None:
        self.chunks.append(chunk)

    def add_timing(self, name: str, ms: float) -> None:
        assert name.endswith("_ms")
        self.timings[name] = ms

    def job_log(self) -> Path:
        if self.log_path is None:
            raise AssertionError("this FakeRunContext has no log file")
        return self.log_path

    def add_memory(self, name: str, mb: float) -> None:
        self.memory[name] = mb

    def add_extra(self, key: str, value: Any) -> None:
        self.extra[key] = value

    def set_cold_start(self, cold: bool) -> None:
        self.cold_start = cold

    @property
    def frames(self) -> np.ndarray:
        """Every emitted frame, [N, H, W, 3] uint8."""
        return (
            np.concatenate(self.chunks_of_frames)
            if self.chunks_of_frames
            else np.zeros((0, 0, 0, 3), np.uint8)
        )


@pytest.fixture
def make_inputs(tmp_path: Path) -> Callable[..., JobInputs]:
    """Build JobInputs for a model with given params and files."""

    def build(model: str, params: dict[str, Any], files: dict[str, Path] | None = None) -> JobInputs:
        scratch = tmp_path / "scratch"
        scratch.mkdir(exist_ok=True)
        return JobInputs(job_id="job-test", model=model, params=params, files=files or {}, scratch=scratch)

    return build


def write_wav(path: Path, samples: np.ndarray, rate: int = 16000) -> Path:
    """Write mono float samples in [-1, 1] as 16-bit PCM WAV."""
    pcm = (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm.tobytes())
    return path


@pytest.fixture
def speech_clip(tmp_path: Path) -> Path:
    """The first 3 s of samples/speech.wav (speech, then the start of the pause)."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.fail("ffmpeg is required (apt-get install -y ffmpeg)")
    out = tmp_path / "speech3s.wav"
    subprocess.run(
        [ffmpeg, "-v", "error", "-i", str(SAMPLES / "speech.wav"), "-t", "3", "-c:a", "pcm_s16le", str(out)],
        check=True,
    )
    return out


@pytest.fixture
def bursts_wav(tmp_path: Path) -> Path:
    """3.2 s alternating 0.4 s of a voiced, speech-band tone and 0.4 s of silence."""
    rate = 16000
    t = np.arange(int(3.2 * rate)) / rate
    voiced = 0.4 * (
        np.sin(2 * np.pi * 220 * t) + 0.6 * np.sin(2 * np.pi * 880 * t) + 0.4 * np.sin(2 * np.pi * 1760 * t)
    )
    gate = (np.floor(t / 0.4) % 2 == 0).astype(float)
    return write_wav(tmp_path / "bursts.wav", 0.5 * voiced * gate)
