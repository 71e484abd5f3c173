"""Several API processes, one /metrics: counts from every process are summed (prometheus multiprocess)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import requests
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from jobservice.cli.embedded import exported
from jobservice.db.migrate import upgrade
from tests.conftest import ROOT, free_port, make_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HEALTHZ = ("jobservice_http_requests_total", (("method", "GET"), ("route", "/healthz"), ("status", "200")))

# One API process: build the app the way gunicorn's worker does and answer `count` requests.
APP_PROCESS = """
import sys
from jobservice.http.app import create_app
from jobservice.settings import Settings
client = create_app(Settings()).test_client()
for _ in range(int(sys.argv[1])):
    assert client.get("/healthz").status_code == 200
"""


def env_for(tmp: Path, multiproc: Path) -> dict[str, str]:
    settings = make_settings(tmp / "var", broker_url="redis://127.0.0.1:1/0", metrics_settle_seconds=0.0)
    upgrade(settings.resolved_database_url())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBSERVICE_", "PROMETHEUS_"))}
    env.update({f"JOBSERVICE_{k.upper()}": v for k, v in exported(settings).items()})
    env.update(PYTHONPATH=str(ROOT), PROMETHEUS_MULTIPROC_DIR=str(multiproc))
    return env


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_two_app_processes_writing_one_folder_are_summed(tmp_path: Path) -> None:
    folder = tmp_path / "multiproc"
    folder.mkdir()
    env = env_for(tmp_path, folder)
    for count in (3, 5):
        subprocess.run(
            [sys.executable, "-c", APP_PROCESS, str(count)], env=env, cwd=ROOT, check=True, timeout=60
        )
    assert len(list(folder.glob("counter_*.db"))) == 2, "each process writes its own file"
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(folder))
    assert samples(generate_latest(registry).decode())[HEALTHZ] == 3 + 5


@pytest.fixture(params=["given folder", "own temporary folder"])
def gunicorn_api(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, Path | None, psutil.Process]]:
    """`jobservice api --workers 2` on a free port, with PROMETHEUS_MULTIPROC_DIR set or not."""
    folder = tmp_path / "multiproc"
    folder.mkdir()
    (folder / "counter_999999.db").write_bytes(b"stale")  # an earlier run's file: must be cleaned
    port = free_port()
    argv = [sys.executable, "-m", "jobservice.cli.main", "api", "--port", str(port), "--workers", "2"]
    log = (tmp_path / "api.log").open("wb")
    env = env_for(tmp_path, folder)
    if request.param == "own temporary folder":
        del env["PROMETHEUS_MULTIPROC_DIR"]
    process = subprocess.Popen(
        argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{base}/openapi.json", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                time.sleep(0.2)
        else:
            raise AssertionError((tmp_path / "api.log").read_text(errors="replace"))
        yield base, folder if "PROMETHEUS_MULTIPROC_DIR" in env else None, psutil.Process(process.pid)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        log.close()


def _wrote(folder: Path, pid: int) -> bool:
    return (folder / f"counter_{pid}.db").exists()


def healthz(base: str, times: int) -> None:
    for _ in range(times):  # a new connection each time, so both workers take some
        assert requests.get(f"{base}/healthz", headers={"Connection": "close"}, timeout=10).status_code == 200


def test_gunicorn_workers_are_summed_and_survive_a_restart(
    gunicorn_api: tuple[str, Path | None, psutil.Process],
) -> None:
    base, folder, master = gunicorn_api
    if folder is not None:
        assert not (folder / "counter_999999.db").exists(), "the folder is emptied when the server starts"
    # One booted worker can answer before the other has started: wait for both, then send.
    deadline = time.monotonic() + 30
    first = {child.pid for child in master.children()}
    while len(first) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
        first = {child.pid for child in master.children()}
    assert len(first) == 2
    # Both workers must answer some: the kernel may hand every new connection to one of them (the
    # other still importing, say), so send until each has written its file (CI once saw 20 to one).
    sent = 0
    while sent < 20 or (folder is not None and not all(_wrote(folder, pid) for pid in first)):
        assert time.monotonic() < deadline + 30, "one gunicorn worker never answered"
        healthz(base, 1)
        sent += 1
    for pid in first:  # gunicorn replaces each worker; their counts must stay in the total
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = {child.pid for child in master.children()}
        if len(now) == 2 and not now & first:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("gunicorn did not replace its workers")
    healthz(base, 10)
    scraped = samples(requests.get(f"{base}/metrics", timeout=10).text)
    assert scraped[HEALTHZ] == sent + 10, "requests answered by four processes, two of them gone, all counted"
    if folder is not None:
        writers = {p.name.split("_")[-1] for p in folder.glob("counter_*.db")}
        assert len(writers) >= 3 and {str(pid) + ".db" for pid in first} <= writers
    assert ("jobservice_metrics_database_up", ()) in scraped and scraped[
        ("jobservice_metrics_database_up", ())
    ] == 1
