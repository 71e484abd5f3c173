"""Batches through real Redis and real Celery worker processes.

- the demo spec (batches/nightly-reference.yaml) end to end on the reference models, twice;
- a slowdown injected with BENCH_SLOWDOWN (the bench fake's own knob) is flagged, a noisy unchanged run is not;
- an interrupted batch resumes without running finished cases again (and survives a worker kill);
- a queued interactive job overtakes queued batch jobs.
"""

from __future__ import annotations

import csv
import io
import json
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from jobservice.db.tables import Batch, Job
from jobservice.nightly.finalize import refresh_batch
from jobservice.nightly.plan import plan_batch
from jobservice.nightly.service import create_batch, resume_batch
from jobservice.nightly.spec import load_spec_file, parse_spec
from tests.conftest import ROOT
from tests.integration.conftest import Stack
from tests.nightly.helpers import batch_jobs

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def cli(stack: Stack, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``jobservice ...`` as a user would, against the stack."""
    return stack.cli(*args, timeout=timeout)


def batch_id_of(output: str) -> str:
    for word in output.split():
        try:
            return str(uuid.UUID(word))
        except ValueError:
            continue
    raise AssertionError(f"no batch id in {output!r}")


def wait_batch(stack: Stack, batch_id: str, timeout: float = 240) -> Batch:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = refresh_batch(stack.services, uuid.UUID(batch_id))
        if batch.status in ("finished", "canceled"):
            return batch
        time.sleep(0.3)
    logs = "\n".join(w.log_text()[-3000:] for w in stack.workers)
    raise AssertionError(f"batch {batch_id} still {batch.status}\n{logs}")


def test_reference_spec_end_to_end(batch_stack: Stack) -> None:
    """The demo spec, run by `jobservice batch run --wait`, then again through POST /batches."""
    batch_stack.start_worker("ref")
    done = cli(batch_stack, "batch", "run", "batches/nightly-reference.yaml", "--wait", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr + batch_stack.workers[0].log_text()[-3000:]
    assert "done" in done.stderr and "queueing 6 jobs" in done.stderr, "a progress bar was drawn"
    first = batch_id_of(done.stdout)
    batch = wait_batch(batch_stack, first)
    assert batch.status == "finished" and batch.verdict == "no_baseline", batch.results
    cases = {c["name"]: c for c in batch.results["cases"]}
    assert set(cases) == {"t2v-320x192", "talking-head-256"}
    for case in cases.values():
        assert case["status"] == "passed", case["expectations"]
        assert all(r["status"] == "succeeded" for r in case["runs"]) and len(case["runs"]) == 3
        assert case["frames"]["consistent"] and case["frames"]["digest"], "deterministic repeats, same frames"
        for metric in ("generate_ms", "render_fps", "rtf", "ttff_ms", "peak_rss_mb"):
            assert case["summary"][metric]["median"] > 0, (case["name"], metric)
    assert cases["talking-head-256"]["summary"]["steady_chunk_core_ms"]["median"] > 0
    assert cases["t2v-320x192"]["info"]["width"] == 320
    env = batch.environment
    assert env["created_by"]["host"] and env["runs"]["versions"]["torch"] and env["runs"]["workers"]
    report = cli(batch_stack, "batch", "report", first, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(report.stdout)))
    assert {r["case"] for r in rows} == set(cases) and all(float(r["generate_ms"]) > 0 for r in rows)

    # Again, through the API (a path under the batch root): the frames are the same as last night.
    batch_stack.services.settings.batch_root = ROOT
    response = batch_stack.client.post("/batches", json={"spec_path": "batches/nightly-reference.yaml"})
    assert response.status_code == 202, response.get_data(as_text=True)
    second = wait_batch(batch_stack, response.get_json()["id"])
    assert second.baseline_id == batch.id
    compared = {c["case"]: c for c in second.results["comparison"]["cases"]}
    for name, case in compared.items():
        assert case["frames"]["verdict"] == "unchanged", (name, case["frames"])
        assert case["validation"]["verdict"] == "ok"
        assert {m["metric"] for m in case["metrics"]} >= {"generate_ms", "rtf", "render_fps"}
    page = batch_stack.client.get(f"/batches/{second.id}/report?format=md").get_data(as_text=True)
    assert "talking-head-256" in page and "## Environment" in page


BENCH_SPEC = {
    "name": "bench-nightly",
    "repeat": 5,
    "metrics": ["generate_ms", "render_fps", "rtf"],
    "cases": [
        {"name": "steady", "model": "fake-bench", "params": {"num_frames": 20, "step_ms": 40, "seed": 1}},
        {
            # 12 repeats, not 5: the noise is estimated from the repeats themselves, and with 4 warm
            # runs a side an unchanged run of this noise crosses k = 3 about 1.3 % of the time
            # (0.7 % each way: CI once saw an "improvement"); with 11 a side about 0.5 %.
            "name": "noisy",
            "model": "fake-bench",
            "repeat": 12,
            "params": {"num_frames": 20, "step_ms": 40, "jitter": 0.5, "seed": 2},
        },
    ],
}


def run_bench(stack: Stack, spec_path: Path) -> Batch:
    done = cli(stack, "batch", "run", str(spec_path), "--wait")
    batch = wait_batch(stack, batch_id_of(done.stdout))
    assert batch.status == "finished", batch.results
    return batch


def test_injected_slowdown_is_flagged_and_noise_is_not(batch_stack: Stack, tmp_path: Path) -> None:
    spec_path = tmp_path / "bench.yaml"
    spec_path.write_text(yaml.safe_dump(BENCH_SPEC))
    worker = batch_stack.start_worker("normal")
    baseline = run_bench(batch_stack, spec_path)
    assert baseline.verdict == "no_baseline"
    worker.stop()

    batch_stack.start_worker("slow", extra_env={"BENCH_SLOWDOWN": "1.25"})
    slow = run_bench(batch_stack, spec_path)
    verdicts = {c["case"]: c for c in slow.results["comparison"]["cases"]}
    assert slow.verdict == "regressed" and verdicts["steady"]["verdict"] == "regressed", json.dumps(verdicts)[
        :3000
    ]
    generate = next(m for m in verdicts["steady"]["metrics"] if m["metric"] == "generate_ms")
    assert 0.15 < generate["change"] < 0.35 and generate["verdict"] == "regression", generate
    gate = cli(batch_stack, "batch", "compare", str(baseline.id), str(slow.id), "--verbose")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "REGRESSED" in gate.stdout and "generate time" in gate.stdout
    batch_stack.workers[-1].stop()

    batch_stack.start_worker("again")
    unchanged = run_bench(batch_stack, spec_path)
    assert unchanged.baseline_id == baseline.id, "a regressed run never becomes the baseline by itself"
    verdicts = {c["case"]: c for c in unchanged.results["comparison"]["cases"]}
    # The steady case is not regressed (ok, or inconclusive when this host's noise in 4 warm runs
    # hides a 3 % change); the noisy one cannot be called ok: its noise hides a 3 % change.
    assert verdicts["steady"]["verdict"] in ("ok", "inconclusive"), json.dumps(verdicts, indent=1)[:3000]
    assert unchanged.verdict == "inconclusive", json.dumps(verdicts, indent=1)[:3000]
    noisy = next(m for m in verdicts["noisy"]["metrics"] if m["metric"] == "generate_ms")
    assert noisy["sigma"] > 0 and noisy["verdict"] == "inconclusive" and noisy["detectable"] > 0.03
    gate = cli(batch_stack, "batch", "compare", str(baseline.id), str(unchanged.id))
    assert gate.returncode == 3 and "INCONCLUSIVE noisy" in gate.stdout, gate.stdout


def test_interrupted_batch_resumes_without_rerunning_finished_cases(batch_stack: Stack) -> None:
    services = batch_stack.services
    body = {
        "name": "resume-test",
        "repeat": 3,
        "cases": [
            {"name": f"c{i}", "model": "fake-bench", "params": {"num_frames": 12, "step_ms": 5, "seed": i}}
            for i in range(3)
        ],
    }
    calls = 0

    # Creation is interrupted (as by Ctrl-C) after four of its nine jobs were queued.
    import jobservice.nightly.service as service

    original = service.submit_job

    def flaky_submit(svc: Any, sub: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls > 4:
            raise KeyboardInterrupt
        return original(svc, sub)

    service.submit_job = flaky_submit  # type: ignore[assignment]
    try:
        with plan_batch(services, parse_spec(body)) as plan, pytest.raises(KeyboardInterrupt):
            create_batch(services, plan, source="cli")
    finally:
        service.submit_job = original
    with services.db.session() as s:
        batch = s.scalars(select(Batch)).one()
    assert batch.status == "creating" and len(batch_jobs(services, batch.id)) == 4

    worker = batch_stack.start_worker("first")
    batch_stack.wait(str(batch_jobs(services, batch.id)[0].id), timeout=60)
    finished_before = {j.id for j in batch_jobs(services, batch.id) if j.status == "succeeded"}
    assert finished_before
    worker.kill(signal.SIGKILL)  # and the worker dies too: the reaper of the next one requeues
    batch_stack.start_worker("second")

    resumed = cli(batch_stack, "batch", "resume", str(batch.id), "--wait")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    final = wait_batch(batch_stack, str(batch.id))
    assert final.status == "finished" and final.verdict == "no_baseline"
    jobs = batch_jobs(services, batch.id)
    slots = [(j.batch_case, j.batch_repeat) for j in jobs]
    assert len(jobs) == 9 and len(set(slots)) == 9, "one job per case and repeat"
    for job in jobs:
        assert job.status == "succeeded", (job.batch_case, job.error_code)
        claims = [
            e
            for e in batch_stack.events(str(job.id))
            if (e.from_status, e.to_status) == ("queued", "running")
        ]
        if job.id in finished_before:
            assert len(claims) == 1, "a case finished before the interruption never ran again"
    # Resuming a finished batch is refused, clearly.
    again = cli(batch_stack, "batch", "resume", str(batch.id))
    assert again.returncode == 1 and "batch_finished" in again.stderr


def test_interactive_job_overtakes_queued_batch_jobs(batch_stack: Stack) -> None:
    services = batch_stack.services
    body = {
        "name": "priority",
        "repeat": 4,
        "cases": [{"name": "a", "model": "fake-bench", "params": {"num_frames": 20, "step_ms": 25}}],
    }
    batch_stack.start_worker("w")
    with plan_batch(services, parse_spec(body)) as plan:
        batch, _ = create_batch(services, plan, source="api")
    jobs = batch_jobs(services, batch.id)
    batch_stack.wait(str(jobs[0].id), predicate=lambda j: j.status == "running", timeout=60)
    interactive = batch_stack.submit({"model": "fake-bench", "num_frames": 4, "step_ms": 1})
    assert batch_stack.wait(interactive, timeout=60).status == "succeeded"
    wait_batch(batch_stack, str(batch.id))
    with services.db.session() as s:
        claimed_at = {str(j.id): j.claimed_at for j in s.scalars(select(Job))}
    claimed = {job_id: at for job_id, at in claimed_at.items() if at is not None}
    assert claimed.keys() == claimed_at.keys(), "every job was claimed"
    order = sorted(claimed, key=lambda k: claimed[k])
    assert order[:2] == [str(jobs[0].id), interactive], "the interactive job ran right after the running one"


def test_resume_is_refused_for_unknown_and_finished_batches(batch_stack: Stack) -> None:
    from jobservice.errors import DomainError

    with pytest.raises(DomainError) as caught:
        resume_batch(batch_stack.services, uuid.uuid4())
    assert caught.value.status == 404
    assert load_spec_file(ROOT / "batches" / "nightly-reference.yaml").spec.name == "nightly-reference"
