"""The real ``omnirt`` package for contract tests: a separate venv, built once, and ``omnirt serve``.

The venv (``var/omnirt-venv-<version>``) holds ``omnirt==0.1.0`` from PyPI and the pinned extras its
CLI and ``serve`` import (protobuf, grpcio, fastapi, uvicorn, python-multipart), every other
dependency pinned too, so a CI run builds exactly what was checked. A stamp file with the pins
makes later runs free; a lock lets two processes ask at once. A venv that cannot be built raises
(the tests that need it fail, they never skip).

One change to OmniRT, and only in that venv: its ``cpu-stub`` backend refuses denoise stages
(``omnirt/backends/cpu_stub.py::denoise_guard``, called by ``BasePipeline.run``), and here is no
GPU or NPU. The guard's one ``if`` line is replaced by ``if False:``; ``modified_files`` compares
every installed file with the wheel's RECORD hashes, so a test can show nothing else differs.
"""

from __future__ import annotations

import base64
import csv
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.1.0"
VENV = ROOT / "var" / f"omnirt-venv-{VERSION}"
# omnirt and what `omnirt generate` / `omnirt serve` import beyond its own requirements.
REQUIREMENTS = [
    f"omnirt=={VERSION}",
    "protobuf==7.36.2",
    "grpcio==1.85.3",
    "fastapi==0.165.0",
    "uvicorn==0.54.0",
    "python-multipart==0.0.34",
]
# Everything those pull in, as resolved when this was checked.
CONSTRAINTS = [
    "annotated-doc==0.0.7",
    "annotated-types==0.8.0",
    "anyio==4.16.0",
    "certifi==2026.10.19.post1",
    "click==8.5.1",
    "h11==0.16.0",
    "httpcore==1.0.9",
    "httpx==0.28.1",
    "idna==3.20",
    "imageio==2.38.1",
    "imageio-ffmpeg==0.8.1",
    "numpy==2.4.6",
    "opentelemetry-api==1.45.2",
    "pillow==13.0.0",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "pyyaml==6.0.4",
    "starlette==1.10.0",
    "typing-inspection==0.4.5",
    "typing-extensions==4.16.0",
]
GUARD_FILE = "omnirt/backends/cpu_stub.py"
GUARD_LINE = '    if getattr(runtime, "name", "") == "cpu-stub":\n'
LIFTED_LINE = (
    "    if False:  # jobservice tests: cpu-stub denoise guard lifted (tests/standins/omnirt_real.py)\n"
)


def _site_packages(venv: Path) -> Path:
    (site,) = (venv / "lib").glob("python3*/site-packages")
    return site


def _stamp() -> str:
    # The base Python too: a venv points at the interpreter it was made from.
    return json.dumps(
        {
            "python": [sys.base_prefix, sys.version],
            "requirements": REQUIREMENTS,
            "constraints": CONSTRAINTS,
            "lifted": LIFTED_LINE,
        }
    )


def ensure_venv() -> Path:
    """The venv's Python, building the venv first if it is missing or stale. Raises on failure."""
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / f"{VENV.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = VENV / "jobservice-stamp.json"
        if not (stamp.exists() and stamp.read_text() == _stamp()):
            _build()
            stamp.write_text(_stamp())
    return VENV / "bin" / "python"


def _build() -> None:
    shutil.rmtree(VENV, ignore_errors=True)
    started = time.monotonic()
    _run([sys.executable, "-m", "venv", str(VENV)])
    constraints = VENV / "constraints.txt"
    constraints.write_text("\n".join(CONSTRAINTS) + "\n")
    python = str(VENV / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", "-q"]
    _run([*pip, "-c", str(constraints), *REQUIREMENTS])
    lift_guard(_site_packages(VENV))
    models = _run([python, "-m", "omnirt", "models"])
    if "soulx-flashhead-1.3b" not in models:
        raise RuntimeError(f"the omnirt venv lists no soulx-flashhead-1.3b:\n{models[-2000:]}")
    print(f"omnirt venv built in {time.monotonic() - started:.1f} s: {VENV}", file=sys.stderr)


def lift_guard(site: Path) -> None:
    """Replace the one line of OmniRT's cpu-stub denoise guard (see the module docstring)."""
    path = site / GUARD_FILE
    text = path.read_text()
    if text.count(GUARD_LINE) != 1:
        raise RuntimeError(f"{path}: the cpu-stub guard line is not there exactly once; OmniRT changed")
    path.write_text(text.replace(GUARD_LINE, LIFTED_LINE))


def modified_files(venv: Path = VENV) -> list[str]:
    """Installed omnirt files whose content differs from the wheel's RECORD."""
    site = _site_packages(venv)
    (record,) = site.glob(f"omnirt-{VERSION}.dist-info/RECORD")
    changed = []
    with record.open(newline="") as rows:
        for name, digest, _ in csv.reader(rows):
            if not digest or not name.startswith("omnirt/"):
                continue
            algorithm, expected = digest.split("=", 1)
            actual = hashlib.new(algorithm, (site / name).read_bytes()).digest()
            if base64.urlsafe_b64encode(actual).rstrip(b"=").decode() != expected:
                changed.append(name)
    return changed


def _run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"building the omnirt venv failed: {' '.join(argv)} exited {done.returncode}\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done.stdout


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OmniRTServe:
    """A real ``omnirt serve --backend cpu-stub`` from the venv, in its own process group."""

    def __init__(self, python: Path, folder: Path, env: dict[str, str]) -> None:
        self.python, self.folder, self.env = python, folder, env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> OmniRTServe:
        """Start it and wait for /healthz."""
        self.folder.mkdir(parents=True, exist_ok=True)
        argv = [str(self.python), "-m", "omnirt", "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        with (self.folder / "serve.log").open("wb") as log:
            self.process = subprocess.Popen(
                [*argv, "--backend", "cpu-stub"],
                cwd=self.folder,
                env={**os.environ, **self.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"omnirt serve exited {self.process.returncode}: {self.log()[-3000:]}")
            try:
                if requests.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                time.sleep(0.2)
        raise RuntimeError(f"omnirt serve did not answer /healthz in 60 s: {self.log()[-3000:]}")

    def job(self, job_id: str) -> dict[str, object]:
        """OmniRT's own record of a job (GET /v1/jobs/<id>)."""
        return dict(requests.get(f"{self.url}/v1/jobs/{job_id}", timeout=5).json())

    def log(self) -> str:
        """What the server printed."""
        path = self.folder / "serve.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Stop the server and whatever it started."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
