"""``jobservice up`` supervises its Redis: killed with jobs queued, it is started again on the same
socket, the worker reconnects, the lost messages are re-sent, and every job ends exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import requests

from jobservice.db.engine import Database
from jobservice.jobs.queries import events_of
from jobservice.media.probe import probe_media
from tests.conftest import ROOT, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TINY = {"width": 128, "height": 96, "num_frames": 17, "num_inference_steps": 4}


def redis_children(up: subprocess.Popen[bytes]) -> list[psutil.Process]:
    return [p for p in psutil.Process(up.pid).children() if "redis-server" in " ".join(p.cmdline())]


@pytest.fixture
def up(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    """A running ``jobservice up`` (its base URL and log); stopped with Ctrl-C afterwards."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
    env.update(PYTHONUNBUFFERED="1", JOBSERVICE_AUTH="off", JOBSERVICE_RESEND_AFTER_SECONDS="2")
    env["JOBSERVICE_REAP_INTERVAL_SECONDS"] = "1"
    log = tmp_path / "up.log"
    argv = [
        sys.executable,
        "-m",
        "jobservice.cli.main",
        "up",
        "--port",
        str(port),
        "--var-dir",
        str(tmp_path / "var"),
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not log.read_text().count("jobservice is up"):
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail(f"jobservice up did not come up:\n{log.read_text()}")
            time.sleep(0.2)
        yield process, base, log
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def test_a_killed_redis_is_restarted_and_no_job_is_lost_or_doubled(
    up: tuple[subprocess.Popen[bytes], str, Path], tmp_path: Path
) -> None:
    process, base, log = up
    [redis] = redis_children(process)
    ids = []
    for i in range(8):
        answer = requests.post(
            f"{base}/jobs", json={"model": "reference-t2v", "prompt": f"hills {i}", **TINY}, timeout=30
        )
        assert answer.status_code == 202, answer.text
        ids.append(answer.json()["id"])
    deadline = time.monotonic() + 60
    while requests.get(f"{base}/jobs/{ids[0]}", timeout=10).json()["status"] == "queued":
        assert time.monotonic() < deadline, "no job started"
        time.sleep(0.1)
    redis.kill()  # SIGKILL, with jobs still queued: their messages die with it
    deadline = time.monotonic() + 180
    while True:
        jobs = [requests.get(f"{base}/jobs/{j}", timeout=10).json() for j in ids]
        if all(j["status"] in ("succeeded", "failed", "canceled") for j in jobs):
            break
        assert time.monotonic() < deadline, (
            f"stalled: {[j['status'] for j in jobs]}\n{log.read_text()[-3000:]}"
        )
        time.sleep(0.5)
    assert "redis exited" in log.read_text()
    [again] = redis_children(process)
    assert again.pid != redis.pid
    db = Database(f"sqlite:///{tmp_path / 'var' / 'jobservice.db'}")
    for job in jobs:
        assert job["status"] == "succeeded", job
        with db.session() as s:
            moves = [(e.from_status, e.to_status) for e in events_of(s, uuid.UUID(job["id"]))]
        assert moves.count(("running", "succeeded")) == 1 and moves[-1] == ("running", "succeeded"), moves
        video = tmp_path / f"{job['id']}.mp4"
        video.write_bytes(requests.get(f"{base}/jobs/{job['id']}/video", timeout=30).content)
        facts = probe_media(video, count_frames=True)
        assert facts.video is not None and facts.video.nb_read_frames == TINY["num_frames"]
    db.dispose()
