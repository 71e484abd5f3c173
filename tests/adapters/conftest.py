"""Fixtures of the reference-model adapter tests: small media inputs (the fake RunContext is
tests.fakes.context.RecordingContext)."""

from __future__ import annotations

import shutil
import subprocess
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from workers.adapters.base import JobInputs

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"


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
