"""Fixtures of the real-model adapter tests: the recording RunContext (tests.fakes.context), inputs."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.context import RecordingContext
from workers.adapters.base import JobInputs

ROOT = Path(__file__).resolve().parents[2]


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
    from jobservice.families.deployment import load_deployment
    from tests.standins.deploy import write_deployment

    path = write_deployment(tmp_path / f"deploy-{model_id}.yaml", {"models": {model_id: entry}})
    return next(s for s in load_deployment(path).specs() if s.id == model_id)


def fh_params(**overrides: Any) -> dict[str, Any]:
    """FlashHead parameters as the API resolves them (the quality profile by default)."""
    from jobservice.families.flashhead import FlashHeadParams

    return FlashHeadParams.model_validate(overrides).model_dump(mode="json")
