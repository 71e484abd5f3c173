"""Submitting and inspecting jobs of the real-model back ends in integration tests."""

from __future__ import annotations

import io
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.integration.conftest import Stack

ROOT = Path(__file__).resolve().parents[2]


def speech_clip(folder: Path, seconds: float = 2.0) -> Path:
    """The first ``seconds`` of the sample speech as 16 kHz mono WAV."""
    out = folder / f"speech-{seconds:g}s.wav"
    if not out.exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["ffmpeg", "-v", "error", "-y", "-i", str(ROOT / "samples" / "speech.wav"), "-t", str(seconds)]
            + ["-ac", "1", "-ar", "16000", str(out)],
            check=True,
        )
    return out


def submit_a2v(stack: Stack, model: str, audio: Path, **params: Any) -> str:
    """POST /jobs as multipart with the sample portrait and ``audio``; returns the accepted job's id."""
    response = post_a2v(stack, model, audio, **params)
    assert response.status_code == 202, response.get_data(as_text=True)
    return str(response.get_json()["id"])


def post_a2v(stack: Stack, model: str, audio: Path, **params: Any) -> Any:
    """POST /jobs as multipart with the sample portrait and ``audio``; returns the response."""
    from werkzeug.datastructures import FileStorage, MultiDict
    from werkzeug.test import encode_multipart

    values: MultiDict[str, Any] = MultiDict()
    values.add("model", model)
    for key, value in params.items():
        values.add(key, str(value))
    portrait = (ROOT / "samples" / "portrait.png").read_bytes()
    values.add("image", FileStorage(stream=io.BytesIO(portrait), filename="face.png", name="image"))
    values.add(
        "audio", FileStorage(stream=io.BytesIO(audio.read_bytes()), filename="speech.wav", name="audio")
    )
    boundary, body = encode_multipart(values)
    return stack.client.post("/jobs", data=body, content_type=f"multipart/form-data; boundary={boundary}")


def report(stack: Stack, job_id: str) -> dict[str, Any]:
    """The job's RunReport."""
    response = stack.client.get(f"/jobs/{job_id}/report")
    assert response.status_code == 200, response.get_data(as_text=True)
    return dict(json.loads(response.get_data()))


def job_log(stack: Stack, job_id: str) -> str:
    """GET /jobs/<id>/log."""
    response = stack.client.get(f"/jobs/{job_id}/log")
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.mimetype == "text/plain"
    return str(response.get_data(as_text=True))


def check(report_data: dict[str, Any], name: str) -> dict[str, Any]:
    """One check of the gate, by name."""
    return next(c for c in report_data["validation"]["checks"] if c["name"] == name)


def gone(pids: list[int], timeout: float = 10.0) -> bool:
    """True once none of ``pids`` runs (zombies count as gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_alive(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
    except (ProcessLookupError, OSError):
        return False
