"""Helpers of the batch tests: specs, and finishing a batch's jobs with synthetic RunReports.

Synthetic reports let the unit tests drive finalization, comparison and reports exactly (the
numbers are chosen); the integration tests run the same code on reports written by real workers.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from jobservice.db.tables import Job, JobStatus, utcnow
from jobservice.jobs.transitions import Owner, claim_job, mark_failed, mark_succeeded
from jobservice.reports.run_report import HostActivity, RunReport
from jobservice.wiring import Services
from tests.conftest import SAMPLES


def t2v_case(name: str = "t2v", repeat: int = 3, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "model": "reference-t2v",
        "params": {"prompt": "a kite", "width": 64, "height": 64, "num_frames": 8, "seed": 1},
        "repeat": repeat,
        "deterministic": True,
        **extra,
    }


def a2v_case(name: str = "face", repeat: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "model": "reference-talking-head",
        "inputs": {"image": "portrait.png", "audio": "speech.wav"},
        "params": {"max_size": 128},
        "repeat": repeat,
        **extra,
    }


def spec(*cases: dict[str, Any], name: str = "nightly-test", **extra: Any) -> dict[str, Any]:
    return {"name": name, "cases": list(cases), **extra}


def batch_root(tmp: Path) -> Path:
    """A batch root holding copies of the sample portrait and speech."""
    root = tmp / "root"
    root.mkdir(parents=True, exist_ok=True)
    for name in ("portrait.png", "speech.wav"):
        shutil.copy(SAMPLES / name, root / name)
    return root


def batch_jobs(services: Services, batch_id: str | uuid.UUID) -> list[Job]:
    with services.db.session() as s:
        return list(
            s.scalars(select(Job).where(Job.batch_id == uuid.UUID(str(batch_id))).order_by(Job.created_at))
        )


Timing = Callable[[Job], float]


def finish_jobs(
    services: Services,
    batch_id: str | uuid.UUID,
    *,
    generate_ms: Timing,
    frames: Callable[[Job], list[str]] | None = None,
    fail: Callable[[Job], str | None] | None = None,
    only: Callable[[Job], bool] | None = None,
    memory: Callable[[Job], dict[str, float]] | None = None,
    host: Callable[[Job], dict[str, Any] | None] | None = None,
) -> None:
    """Run every queued job of a batch (or those ``only`` picks) "by hand" with a synthetic report."""
    for job in batch_jobs(services, batch_id):
        if job.status != JobStatus.QUEUED or (only is not None and not only(job)):
            continue
        with services.db.session() as s:
            claimed = claim_job(s, job.id, worker_id="synthetic@test#1", lease_seconds=60)
        assert claimed is not None
        owner = Owner("synthetic@test#1", claimed.attempts)
        ms = generate_ms(job)
        hashes = frames(job) if frames else [f"{i:016x}" for i in range(8)]
        started = utcnow()
        report = RunReport(
            run_id=str(uuid.uuid4()),
            job_id=str(job.id),
            task=job.task,
            model=job.model,
            backend="cpu",
            worker_id=owner.worker_id,
            status="succeeded",
            cold_start=job.batch_repeat == 0 and job.batch_case == "cold-case",
            queue_wait_ms=5.0,
            timings={"generate_ms": ms, "total_ms": ms + 200.0},
            frames_generated=8,
            media_duration_s=1.0,
            render_fps=round(8 / (ms / 1000), 3),
            rtf=round(ms / 1000, 4),
            generate_started_at=started,
            first_frame_at=started + timedelta(milliseconds=ms / 4),
            memory=memory(job) if memory else {"peak_rss_mb": 500.0},
            device_placement={"device": "cpu", "torch_device": "cpu"},
            frame_hashes=hashes,
            versions={"jobservice": "0.1.0", "torch": "2.13.0"},
            host=HostActivity.model_validate(activity) if host and (activity := host(job)) else None,
        )
        key = f"jobs/{job.id}/report.json"
        services.store.put_bytes(key, report.model_dump_json().encode(), content_type="application/json")
        code = fail(job) if fail else None
        with services.db.session() as s:
            if code:
                mark_failed(s, job.id, code=code, message="synthetic failure", owner=owner, report_key=key)
            else:
                mark_succeeded(
                    s,
                    job.id,
                    owner=owner,
                    output_key=f"jobs/{job.id}/output.mp4",
                    report_key=key,
                    verdict="passed",
                    timings={"generate_ms": ms},
                    validation_summary={},
                    cold_start=False,
                )


def steady(base: float, *, jitter: float = 0.0) -> Timing:
    """generate_ms per repeat: ``base`` with a fixed, repeat-dependent wobble of ± ``jitter``."""
    wobble = (-1.0, 0.4, 1.0, -0.3, 0.2)
    return lambda job: base * (1 + jitter * wobble[int(job.batch_repeat or 0) % len(wobble)])
