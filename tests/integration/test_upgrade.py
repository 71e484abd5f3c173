"""An upgrade with jobs in flight (issue 24, item 1): the release named in ``scripts/upgrade-from``,
built from git into its own venv, runs its worker and its API beside this checkout's API against one
PostgreSQL database migrated to this checkout's head and one broker; then its worker stops (a rolling
upgrade) and this checkout's worker takes over, with jobs queued by both APIs meanwhile. Every job
succeeds exactly once, run once, by the worker of the version the test expects."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import sysconfig
import tarfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from jobservice import __version__, broker
from jobservice.db.tables import Job, utcnow
from jobservice.jobs.transitions import record_created
from tests.conftest import ROOT, free_port
from tests.integration.conftest import Stack, WorkerProcess, build_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOB: dict[str, Any] = {"model": "fake-good", "num_frames": 12}


@dataclass(frozen=True)
class Release:
    """An earlier release: its source tree and the python of its own venv."""

    ref: str
    src: Path
    python: Path
    version: str


def upgrade_from() -> str:
    """The commit or tag of ``scripts/upgrade-from`` (its last line that is not a comment)."""
    lines = (ROOT / "scripts" / "upgrade-from").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")][-1]


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Release:
    """The previous release from git (``git archive``), in a venv of its own: the venv sees the
    release's source first and borrows this checkout's third-party packages (never its
    ``jobservice``, whose editable-install hook the borrowed folder's .pth files do not run)."""
    ref = upgrade_from()
    root = tmp_path_factory.mktemp("previous")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", ref], capture_output=True)
    if archive.returncode != 0:  # a shallow clone: fetch the history from where it was cloned from
        shallow = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"], capture_output=True, text=True
        ).stdout.strip()
        fetch = ["fetch", "--quiet", "--unshallow"] if shallow == "true" else ["fetch", "--quiet"]
        subprocess.run(["git", "-C", str(ROOT), *fetch], capture_output=True, timeout=300)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", ref], capture_output=True
        )
    if archive.returncode != 0:
        pytest.fail(
            f"release {ref} (scripts/upgrade-from) is not in this clone's history: "
            f"{archive.stderr.decode(errors='replace').strip()}; the upgrade test needs it (git fetch --unshallow)"
        )
    src = root / "src"
    src.mkdir()
    tar = root / "release.tar"
    tar.write_bytes(archive.stdout)
    with tarfile.open(tar) as bundle:
        bundle.extractall(src, filter="data")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "00-jobservice-previous.pth").write_text(f"{src}\n{sysconfig.get_paths()['purelib']}\n")
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import jobservice, workers; print(jobservice.__version__); print(jobservice.__file__)",
        ],
        capture_output=True,
        text=True,
        cwd=root,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert probe.returncode == 0, probe.stderr
    version, where = probe.stdout.split()
    assert Path(where).is_relative_to(src), f"the previous release's venv imports {where}"
    assert version != __version__, "scripts/upgrade-from names a release with this checkout's version"
    return Release(ref, src, python, version)


@pytest.fixture
def pg_stack(tmp_path: Path, pg_url: str) -> Iterator[Stack]:
    stack = build_stack(tmp_path, database_url=pg_url)  # migrated to this checkout's head
    yield stack
    stack.close()


def start(stack: Stack, release: Release, name: str, *args: str) -> WorkerProcess:
    """A ``jobservice`` process of the previous release, with the stack's settings."""
    log = stack.tmp / f"previous-{name}.log"
    env = {**stack.env, "PYTHONPATH": str(release.src)}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(release.python), "-m", "jobservice.cli.main", *args],
            env=env,
            cwd=release.src,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    handle = WorkerProcess(name, process, log)
    stack.workers.append(handle)  # stopped with the stack
    return handle


def submit_old(base: str) -> str:
    answer = requests.post(f"{base}/jobs", json=JOB, timeout=30)
    assert answer.status_code == 202, answer.text
    return str(answer.json()["id"])


def report_version(stack: Stack, job_id: str) -> str:
    job = stack.job(job_id)
    assert job.report_key
    report = json.loads(stack.services.store.get_bytes(job.report_key))
    return str(report["versions"]["jobservice"])


def test_the_previous_release_and_this_one_share_a_database_and_a_broker(
    pg_stack: Stack, previous: Release
) -> None:
    stack = pg_stack
    port = free_port()
    old_api = start(stack, previous, "api", "api", "--host", "127.0.0.1", "--port", str(port))
    old_worker = start(stack, previous, "worker", "worker", "--devices", "cpu", "--name", "old@test")
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{base}/healthz", timeout=2).ok:
                break
        except requests.RequestException:
            time.sleep(0.3)
    else:
        raise AssertionError(f"the previous release's API did not start:\n{old_api.log_text()[-3000:]}")
    assert requests.get(f"{base}/readyz", timeout=10).json().get("version") != __version__
    assert stack.client.get("/readyz").get_json()["version"] == __version__

    # 1. The previous release's worker runs what both APIs queue.
    first = [stack.submit(JOB) for _ in range(3)] + [submit_old(base) for _ in range(3)]
    for job_id in first:
        job = stack.wait(job_id, timeout=150)
        assert job.status == "succeeded", (
            job_id,
            job.error_code,
            job.error_message,
            old_worker.log_text()[-3000:],
        )
        assert (job.worker_id or "").startswith("old@test") and report_version(
            stack, job_id
        ) == previous.version

    # 2. A rolling upgrade: the old worker stops; both APIs queue while no worker runs; the new one
    #    starts and runs them, and what both APIs queue after.
    old_worker.kill(signal.SIGTERM)
    assert old_worker.process.poll() is not None, "the previous release's worker did not stop on SIGTERM"
    second = [stack.submit(JOB) for _ in range(2)] + [submit_old(base) for _ in range(2)]
    stack.start_worker("new")
    second += [stack.submit(JOB), submit_old(base)]
    for job_id in second:
        job = stack.wait(job_id, timeout=150)
        assert job.status == "succeeded", (job_id, job.error_code, job.error_message)
        assert (job.worker_id or "").startswith("new@test") and report_version(stack, job_id) == __version__

    for job_id in first + second:
        events = stack.events(job_id)
        assert sum(1 for e in events if e.to_status == "succeeded") == 1, job_id
        assert sum(1 for e in events if e.to_status == "running") == 1 and stack.job(job_id).attempts == 1
    print(
        f"upgrade {previous.ref} ({previous.version}) -> {__version__}: {len(first + second)} jobs, each once"
    )


def test_a_message_newer_than_the_worker_reads_is_left_and_the_job_runs_later(stack: Stack) -> None:
    """A newer release's dispatcher sends a message format this worker cannot read: the worker leaves
    it (the job is neither run nor failed), the reaper hands the job back once the message is gone,
    and the message this release's dispatcher sends then is run, once."""
    stack.start_worker("w1")
    warm = stack.submit(JOB)
    assert stack.wait(warm).status == "succeeded"
    newer = broker.MESSAGE_VERSION + 1
    job = Job(
        id=uuid.uuid4(),
        task="text2video",
        model=JOB["model"],
        params={
            "prompt": "from a newer release",
            "num_frames": 12,
            "fps": 12,
            "size": 64,
            "step_seconds": 0.0,
        },
        created_at=utcnow(),
    )
    job.max_attempts, job.dispatched_to, job.enqueued_at = 3, "w1@test", utcnow()
    with stack.services.db.session() as s:  # handed to the group as a newer dispatcher hands it out
        record_created(s, job)
    message = broker.JobMessage(job_id=job.id, group="w1@test", version=newer)
    broker.send_job(stack.services.celery, message)
    job_id = str(job.id)
    done = stack.wait(job_id, timeout=90)
    assert done.status == "succeeded" and done.attempts == 1, (done.error_code, done.error_message)
    log = stack.workers[0].log_text()
    assert f"job {job_id}: message format {newer} is newer than this worker reads" in log
    events = stack.events(job_id)
    assert sum(1 for e in events if e.to_status == "running") == 1
