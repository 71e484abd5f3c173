"""Building the RunReport of a run, and the short summaries kept in the jobs table."""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from jobservice.catalog import ModelSpec
from jobservice.db.tables import Job, utcnow
from jobservice.jobs import retries
from jobservice.reports.run_report import (
    Artifact,
    GateTries,
    HostActivity,
    ReportError,
    RunReport,
    Validation,
    residency_for,
    summarize_chunks,
)
from workers.adapters.base import RunOutput
from workers.card_health import CardHealth
from workers.devices import card_placement, memory_report
from workers.run.context import PipelineContext
from workers.runtime import WorkerRuntime, versions


class RunState(Protocol):
    """What a run knows when its report is built (the pipeline's ``JobRun`` is one)."""

    job: Job
    ctx: PipelineContext | None
    output: RunOutput | None
    validation: Validation | None
    timings: dict[str, float]
    cold: bool
    generate_started_at: datetime | None
    generate_memory: dict[str, float] | None  # the device's memory read when the last frame came
    card_health: list[CardHealth] | None  # the cards as NVML / npu-smi read them then
    host: HostActivity | None  # what else ran on the host while it generated
    runtime: WorkerRuntime
    spec: ModelSpec | None

    def key(self, name: str) -> str:
        """The object-store key of one of the run's files."""
        ...


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def failed_check_message(validation: Validation) -> str:
    """One sentence naming what the output gate found wrong."""
    parts = []
    for check in validation.failed_checks:
        detail = check.detail or f"expected {check.expected}, got {check.actual}"
        parts.append(f"{check.name} ({detail})")
    return "The output video failed validation: " + "; ".join(parts) + "."


def validation_summary(validation: Validation, *, warnings: list[str] | None = None) -> dict[str, Any]:
    """What the jobs table keeps of the gate's findings, plus the adapter's warnings (the report's
    ``extra.warnings``: e.g. a requested preset that the model's checkout did not honour), which
    the job's view shows as ``warnings``."""
    summary: dict[str, Any] = {
        "failed_checks": [c.name for c in validation.failed_checks],
        "black_seconds": round(sum(s.duration_s for s in validation.black_segments), 3),
        "freeze_seconds": round(sum(s.duration_s for s in validation.freeze_segments), 3),
        "decoded_frames": validation.decoded_frames,
        "mode": validation.mode,
    }
    if warnings:
        summary["warnings"] = [str(w) for w in warnings]
    return summary


def build_report(
    run: RunState, *, status: str, error: tuple[str, str] | None, video_path: Path | None
) -> RunReport:
    """Assemble the RunReport of ``run`` as it stands now."""
    job, ctx, output = run.job, run.ctx, run.output
    timings = _timings(run)
    frames = ctx.frames_emitted if ctx else 0
    if output is not None and output.video_path is not None:
        frames = output.frames_generated
    duration = output.media_duration_s if output else None
    generate_ms = timings.get("generate_ms")
    render_fps = round(frames / (generate_ms / 1000), 3) if generate_ms and frames else None
    rtf = round((generate_ms / 1000) / duration, 4) if generate_ms and duration else None
    claimed = job.claimed_at
    waited_from = job.created_at if job.attempts <= 1 or job.enqueued_at is None else job.enqueued_at
    queue_wait_ms = round((claimed - waited_from).total_seconds() * 1000, 3) if claimed else 0.0
    device = run.runtime.device
    execution_mode = run.spec.execution_mode if run.spec else "resident"
    return RunReport(
        run_id=str(uuid.uuid4()),
        job_id=str(job.id),
        task=job.task,
        model=job.model,
        backend=device.kind,
        worker_id=run.runtime.worker_id,
        execution_mode=execution_mode,  # type: ignore[arg-type]
        attempt=job.attempts,
        status=status,  # type: ignore[arg-type]
        cold_start=run.cold,
        model_residency=residency_for(execution_mode, run.cold),
        queue_wait_ms=queue_wait_ms,
        timings=timings,
        step_ms=list(ctx.step_ms) if ctx else [],
        chunks=list(ctx.chunks) if ctx else [],
        chunk_summary=summarize_chunks(list(ctx.chunks)) if ctx else {},
        frames_generated=frames,
        media_duration_s=duration,
        render_fps=render_fps,
        rtf=rtf,
        claimed_at=claimed,
        generate_started_at=run.generate_started_at,
        last_frame_at=ctx.last_frame_at if ctx else None,
        first_frame_at=ctx.first_frame_at if ctx else None,
        finished_at=utcnow(),
        # read at the last frame: a handed-over run is reported while the card runs the next job
        memory={**(run.generate_memory or memory_report(device)), **(ctx.memory if ctx else {})},
        config_resolved=retries.run_params(job),
        device_placement={
            "device": device.label,
            "torch_device": device.torch_device,
            **card_placement(run.card_health),
        },
        artifacts=_artifacts(run, video_path),
        input_digests={
            name: str(meta.get("sha256"))
            for name, meta in (job.input_meta or {}).items()
            if meta.get("sha256")
        },
        frame_hashes=list(ctx.frame_hashes or []) if ctx else [],
        versions=versions(),
        extra={**(ctx.extra if ctx else {}), **(output.extra if output else {})},
        host=run.host,
        validation=run.validation,
        error=ReportError(code=error[0], message=error[1]) if error else None,
        tries=_tries(job),
    )


def _tries(job: Job) -> GateTries | None:
    """Which try of its job the run is, for a job that may retry a failed gate."""
    earlier = retries.tries_of(job)
    promised = int(job.retry_on_validation_failure or 0)
    if not promised and not earlier:
        return None
    return GateTries(
        try_number=len(earlier) + 1,
        of_at_most=promised + 1,
        seed=retries.seed_of_try(dict(job.params or {}), len(earlier)),
        earlier=earlier,
    )


def _timings(run: RunState) -> dict[str, float]:
    """The pipeline's stage timings, the context's, and the gate's."""
    timings = dict(run.timings)
    if run.ctx is not None:
        timings.update(run.ctx.timings)
        if run.ctx.write_ms:
            timings["frame_write_ms"] = round(run.ctx.write_ms, 3)
    if run.validation is not None:
        timings.setdefault("validate_ms", run.validation.elapsed_ms)
        if run.validation.decode_cpu_ms is not None:
            timings["decode_cpu_ms"] = run.validation.decode_cpu_ms
    return timings


def _artifacts(run: RunState, video_path: Path | None) -> list[Artifact]:
    """The output video as an artifact, once the gate has probed it."""
    if video_path is None or not video_path.exists() or run.validation is None:
        return []
    probe = run.validation.probe
    return [
        Artifact(
            kind="video",
            key=run.key("output.mp4"),
            mime="video/mp4",
            size_bytes=video_path.stat().st_size,
            width=probe.video.width if probe.video else None,
            height=probe.video.height if probe.video else None,
            num_frames=probe.video.nb_frames if probe.video else None,
            duration_s=probe.duration_s,
            sha256=_sha256(video_path),
        )
    ]
