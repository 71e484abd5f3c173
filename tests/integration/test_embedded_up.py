"""``jobservice up`` end to end, as the quickstart uses it: its own Redis, gunicorn, a CPU worker,
the reference models, the CLI client; and Ctrl-C stops every process it started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests

from jobservice.media.probe import probe_media
from tests.conftest import ROOT, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def jobservice(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobservice.cli.main", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_up_runs_both_reference_models_and_stops_cleanly(
    tmp_path: Path, short_speech: Path, portrait: Path
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
    env["PYTHONUNBUFFERED"] = "1"
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        up = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobservice.cli.main",
                "up",
                "--port",
                str(port),
                "--var-dir",
                str(tmp_path / "var"),
            ],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    descendants: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.2)
        else:
            pytest.fail(f"jobservice up did not come up:\n{log.read_text()}")
        names = " ".join(" ".join(p.cmdline()) for p in psutil.Process(up.pid).children(recursive=True))
        assert "redis-server" in names and "jobservice.cli.main api" in names
        assert "celery" in names or "jobservice.cli.main worker" in names

        a2v = tmp_path / "a2v.mp4"
        result = jobservice(
            "submit",
            "--url",
            base,
            "--image",
            str(portrait),
            "--audio",
            str(short_speech),
            "-p",
            "max_size=256",
            "--output",
            str(a2v),
            "--json",
            env=env,
        )
        assert result.returncode == 0, result.stderr + result.stdout
        job = json.loads(result.stdout)
        assert job["status"] == "succeeded" and job["validation"]["verdict"] == "passed"
        facts = probe_media(a2v)
        assert facts.audio is not None and facts.video is not None
        assert (
            max(facts.video.width or 0, facts.video.height or 0) <= 256 and (facts.video.width or 1) % 16 == 0
        )
        assert abs((facts.duration_s or 0) - job["inputs"]["audio"]["duration_s"]) < 0.1

        result = jobservice(
            "submit",
            "--url",
            base,
            "--prompt",
            "green hills",
            "-p",
            "width=128",
            "-p",
            "height=96",
            "-p",
            "num_frames=17",
            "-p",
            "num_inference_steps=4",
            env=env,
        )
        assert result.returncode == 0, result.stderr + result.stdout
        assert "succeeded" in result.stdout and "validation: passed" in result.stdout

        status = jobservice("status", "--url", base, job["id"], env=env)
        assert status.returncode == 0 and job["id"] in status.stdout
        devices = jobservice("devices", "--json", env={**env, "JOBSERVICE_VAR_DIR": str(tmp_path / "var")})
        assert devices.returncode == 0
        assert json.loads(devices.stdout)["workers"][0]["devices"] == "cpu"
    finally:
        descendants = psutil.Process(up.pid).children(recursive=True)
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            pytest.fail("jobservice up did not stop on Ctrl-C")
    assert up.returncode == 0, log.read_text()[-3000:]
    time.sleep(0.5)
    leftovers = [p for p in descendants if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert leftovers == [], f"processes left behind: {[p.cmdline() for p in leftovers]}"
