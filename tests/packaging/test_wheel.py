"""A wheel built from the repository, installed non-editable, migrates its database and serves its pages.

The wheel is installed with ``--no-deps`` into a fresh venv that borrows the test venv's
dependencies through a path file (so the test needs no network); the project itself must come from
the wheel alone, which the test checks before anything else.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import ROOT, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _run(argv: list[str], **kwargs: object) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{argv}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return str(done.stdout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed; returns its bin folder."""
    tmp = tmp_path_factory.mktemp("wheel")
    # Built from a copy: setuptools leaves build/ and *.egg-info next to the sources it builds.
    source = tmp / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("jobservice", "workers"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp),
            str(source),
        ]
    )
    (wheel,) = tmp.glob("jobservice-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    site = Path(
        _run(
            [str(venv / "bin/python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).strip()
    )
    # The test venv's site-packages as a plain path: its .pth files (the editable install) are not run.
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin/python"),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ]
    )
    return venv / "bin"


def test_wheel_carries_the_package_not_the_checkout(installed: Path, tmp_path: Path) -> None:
    where = _run(
        [
            str(installed / "python"),
            "-c",
            "import jobservice, workers; print(jobservice.__file__, workers.__file__)",
        ],
        cwd=tmp_path,
    )
    assert str(ROOT) not in where and "site-packages" in where, where


def test_installed_wheel_migrates_and_serves_pages(installed: Path, tmp_path: Path, clean_redis: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_") and k != "PYTHONPATH"}
    env.update({"JOBSERVICE_VAR_DIR": str(tmp_path / "var"), "JOBSERVICE_BROKER_URL": clean_redis})
    out = _run([str(installed / "jobservice"), "db", "upgrade"], cwd=tmp_path, env=env)
    assert (tmp_path / "var").exists(), out
    # `jobservice api` wants API keys by default: the wheel's own CLI makes one.
    made = _run(
        [str(installed / "jobservice"), "keys", "create", "--name", "wheel", "--json"], cwd=tmp_path, env=env
    )
    key = {"Authorization": f"Bearer {json.loads(made)['secret']}"}
    port = free_port()
    api = subprocess.Popen(
        [str(installed / "jobservice"), "api", "--port", str(port), "--workers", "1"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                time.sleep(0.2)
        assert requests.get(f"{base}/jobs", timeout=10).status_code == 401
        signin = requests.get(f"{base}/", timeout=10, allow_redirects=True)
        assert signin.status_code == 200 and 'name="key"' in signin.text, signin.text[:500]
        home = requests.get(f"{base}/", headers=key, timeout=10)
        assert home.status_code == 200 and "<form" in home.text, home.text[:500]
        css = requests.get(f"{base}/ui/static/style.css", timeout=10)
        assert css.status_code == 200 and css.text.strip()
        created = requests.post(
            f"{base}/jobs",
            json={"task": "text2video", "prompt": "a kite", "num_frames": 9},
            headers=key,
            timeout=10,
        )
        assert created.status_code == 202, created.text
        page = requests.get(f"{base}/ui/jobs/{created.json()['id']}", headers=key, timeout=10)
        assert page.status_code == 200 and created.json()["id"] in page.text
        batches = requests.get(f"{base}/ui/batches", headers=key, timeout=10)
        assert batches.status_code == 200 and "<html" in batches.text.lower()
        assert requests.get(f"{base}/ui/batches/static/batches.css", timeout=10).status_code == 200
    finally:
        api.terminate()
        try:
            api.wait(timeout=20)
        except subprocess.TimeoutExpired:
            api.kill()
        if api.stderr is not None:
            api.stderr.close()
