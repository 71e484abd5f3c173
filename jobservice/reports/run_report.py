"""The RunReport: what a run did, how long each stage took, and what the output gate found.

Field names follow OmniRT's RunReport where they overlap (run_id, job_id, task, model, backend,
worker_id, execution_mode, queue_wait_ms, timings{<stage>_ms}, memory{peak_mb}, config_resolved,
artifacts, error, device_placement), plus what no peer records: the validation block, cold_start,
chunk telemetry, render_fps, rtf, input digests and versions. Metric definitions follow the seed
benchmark documents: ``render_fps`` is frames generated per second of generation time, ``rtf`` is
generation time divided by media duration, "steady" chunk figures exclude chunk 0.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = "1.3.0"  # 1.3.0: tries (retry on a failed gate)


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamFacts(_Base):
    """ffprobe facts about one stream."""

    index: int
    codec_type: str
    codec_name: str | None = None
    width: int | None = None
    height: int | None = None
    fps: float | None = None
    duration_s: float | None = None
    nb_frames: int | None = None
    nb_read_packets: int | None = None
    nb_read_frames: int | None = Field(default=None, description="Frames decoded by ffprobe -count_frames.")
    sample_rate: int | None = None
    channels: int | None = None
    pix_fmt: str | None = None


class ProbeFacts(_Base):
    """ffprobe facts about a media file."""

    format_name: str | None = None
    duration_s: float | None = None
    size_bytes: int | None = None
    bit_rate: int | None = None
    video: StreamFacts | None = None
    audio: StreamFacts | None = None


class Segment(_Base):
    """A black or frozen stretch of the video, in seconds."""

    start_s: float
    end_s: float
    duration_s: float
    open_ended: bool = Field(default=False, description="Ran to the end of the file and was closed by us.")


class Check(_Base):
    """One expectation of the gate, with what was found."""

    name: str
    passed: bool
    expected: Any = None
    actual: Any = None
    detail: str = ""


class Validation(_Base):
    """The output gate's findings and verdict."""

    verdict: Literal["passed", "failed"]
    mode: Literal["streamed", "file"] = Field(
        description="streamed: the decode pass ran on the encoded stream while it was produced; "
        "file: one decode pass over the finished file."
    )
    probe: ProbeFacts
    decoded_frames: int | None = None
    black_segments: list[Segment] = Field(default_factory=list)
    freeze_segments: list[Segment] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)
    elapsed_ms: float = Field(default=0.0, description="Wall time the gate added after the last frame.")
    decode_cpu_ms: float | None = Field(default=None, description="CPU time of the decode pass.")

    @property
    def failed_checks(self) -> list[Check]:
        """The checks that did not pass."""
        return [c for c in self.checks if not c.passed]


class ChunkTelemetry(_Base):
    """Timing of one generated chunk (audio2video)."""

    index: int
    frames: int
    audio_embedding_ms: float = 0.0
    core_ms: float = 0.0
    copy_ms: float = 0.0
    total_ms: float = 0.0


class Artifact(_Base):
    """A produced file, as stored."""

    kind: Literal["video", "image", "audio", "text", "json", "log"]
    key: str
    mime: str
    size_bytes: int | None = None
    width: int | None = None
    height: int | None = None
    num_frames: int | None = None
    duration_s: float | None = None
    sha256: str | None = None


class HostActivity(_Base):
    """What else ran on the worker's host while the run loaded and generated (workers/host_activity.py)."""

    window_ms: float = Field(description="The window measured: from taking the model to the last frame.")
    cpu_count: int
    busy_cores: float | None = Field(description="Average cores busy on the whole host; None without /proc.")
    own_cores: float = Field(description="This worker process and the children it reaped (a model process).")
    other_cores: float | None = Field(description="busy_cores - own_cores: other processes on the host.")
    finishing_jobs: int = Field(description="Other jobs this worker was finishing beside the run.")
    finishing_ms: float = Field(description="How long that finishing overlapped the window.")
    undisturbed: bool = Field(
        description="The run waited until this worker had finished its earlier jobs (a batch's measurement)."
    )
    waited_ms: float = Field(default=0.0, description="How long that wait was.")
    disturbed: bool = Field(
        description="Other work ran beside it: this worker's finishing, or other processes keeping at "
        "least a tenth of the host's cores busy on average."
    )
    load_1m: float | None = None


class ReportError(_Base):
    """Why a run did not succeed."""

    code: str
    message: str


class GateTries(_Base):
    """Where a run stands among its job's tries with the next seed (jobservice.jobs.retries)."""

    try_number: int = Field(description="1 for the job's first try, 2 for its first retry, ...")
    of_at_most: int = Field(description="1 + the retries the job was promised.")
    seed: int | None = Field(description="The seed this try ran with (the request's seed + try - 1).")
    earlier: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The earlier tries the gate failed: try, attempt, seed, verdict, failed_checks, "
        "message, output_key, report_key, card_seconds, finished_at.",
    )


class RunReport(_Base):
    """Everything a run recorded; stored as ``jobs/<id>/report.json``."""

    schema_version: str = SCHEMA_VERSION
    run_id: str
    job_id: str
    task: str
    model: str
    backend: str = Field(description="cpu, cuda or npu; or the external system driven.")
    worker_id: str
    execution_mode: Literal["resident", "subprocess", "http", "persistent_worker"] = "resident"
    attempt: int = 1
    status: Literal["succeeded", "failed", "canceled"]
    cold_start: bool = Field(description="True when this run loaded the model.")
    model_residency: Literal["resident", "per_run"] | None = Field(
        default=None,
        description="per_run: the back end loads the model in every run (a process per job: FlashHead, "
        "OmniRT's CLI mode), so every run's figures are cold ones; resident: the model stays loaded "
        "between runs and only the run that loaded it is cold. Absent from reports before 1.1.0 "
        "(see ``model_residency_of``).",
    )
    queue_wait_ms: float
    timings: dict[str, float] = Field(
        default_factory=dict,
        description="fetch_ms, load_ms (cold only), generate_ms, encode_ms, validate_ms, upload_ms, "
        "total_ms, "
        "plus per-stage figures of the adapter.",
    )
    step_ms: list[float] = Field(default_factory=list, description="Per denoising step (text2video).")
    chunks: list[ChunkTelemetry] = Field(default_factory=list, description="Per chunk (audio2video).")
    chunk_summary: dict[str, float] = Field(
        default_factory=dict,
        description="audio_embedding_ms_avg, chunk_core_ms_avg, steady_chunk_core_ms_avg, chunk_copy_ms_avg, "
        "chunk_total_ms_avg, steady_chunk_total_ms_avg, chunk_count.",
    )
    frames_generated: int = 0
    media_duration_s: float | None = None
    render_fps: float | None = None
    rtf: float | None = None
    claimed_at: datetime | None = None
    generate_started_at: datetime | None = None
    last_frame_at: datetime | None = None
    first_frame_at: datetime | None = Field(default=None, description="When the model emitted a first frame.")
    finished_at: datetime | None = None
    memory: dict[str, float] = Field(default_factory=dict, description="peak_mb and friends.")
    config_resolved: dict[str, Any] = Field(default_factory=dict)
    device_placement: dict[str, str] = Field(default_factory=dict)
    artifacts: list[Artifact] = Field(default_factory=list)
    input_digests: dict[str, str] = Field(default_factory=dict, description="sha256 of each input.")
    frame_hashes: list[str] = Field(
        default_factory=list,
        description="Batch jobs: sha256 (16 hex digits) of each generated frame's raw RGB bytes, taken "
        "before encoding, so outputs of deterministic models can be compared frame by frame.",
    )
    versions: dict[str, str] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict, description="Adapter-specific telemetry.")
    usage: dict[str, Any] | None = Field(
        default=None,
        description="The card-seconds this run used when it ended: card_seconds, phases {load, generate, "
        "finish} (each seconds times the model's cards), cards, card_kind, group.",
    )
    host: HostActivity | None = Field(
        default=None, description="What else ran on the host while it generated (a noisy sample shows)."
    )
    validation: Validation | None = None
    error: ReportError | None = None
    tries: GateTries | None = Field(
        default=None,
        description="A job that may retry a failed gate with the next seed: which try this run was, "
        "its seed, and the earlier tries the gate failed (null: the job may not retry).",
    )


def summarize_chunks(chunks: list[ChunkTelemetry]) -> dict[str, float]:
    """FlashTalk-style chunk figures; "steady" excludes chunk 0."""
    if not chunks:
        return {}

    def avg(values: list[float]) -> float:
        return round(sum(values) / len(values), 3) if values else 0.0

    steady = chunks[1:]
    return {
        "chunk_count": float(len(chunks)),
        "audio_embedding_ms_avg": avg([c.audio_embedding_ms for c in chunks]),
        "chunk_core_ms_avg": avg([c.core_ms for c in chunks]),
        "steady_chunk_core_ms_avg": avg([c.core_ms for c in steady]),
        "chunk_copy_ms_avg": avg([c.copy_ms for c in chunks]),
        "chunk_total_ms_avg": avg([c.total_ms for c in chunks]),
        "steady_chunk_total_ms_avg": avg([c.total_ms for c in steady]),
    }


def residency_for(execution_mode: str, cold_start: bool) -> Literal["resident", "per_run"]:
    """Whether a run's model was loaded for that run alone.

    The catalog's ``execution_mode`` says how a back end runs its model: "subprocess" is a process
    per job (FlashHead's script, OmniRT's CLI), which loads the model when that run says it was a
    cold start; every other mode (in-process, a resident worker, a server) keeps it loaded.
    """
    return "per_run" if execution_mode == "subprocess" and cold_start else "resident"


def model_residency_of(report: dict[str, Any]) -> Literal["resident", "per_run"]:
    """A stored report's ``model_residency``, worked out for reports written before it existed."""
    value = report.get("model_residency")
    if value in ("resident", "per_run"):
        return value
    return residency_for(str(report.get("execution_mode") or "resident"), bool(report.get("cold_start")))
