"""The figures a batch tracks, read from each job's RunReport.

Definitions follow the seed benchmark documents: cold and warm are never mixed (a warm metric
ignores the run that loaded the model, a cold one uses only such runs), "steady" chunk figures
exclude chunk 0, ``render_fps`` is frames per second of generation time and ``rtf`` is
generation time over media duration.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

Report = dict[str, Any]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _timing(name: str) -> Callable[[Report], float | None]:
    return lambda r: _number((r.get("timings") or {}).get(name))


def _steady(name: str) -> Callable[[Report], float | None]:
    def read(report: Report) -> float | None:
        summary = report.get("chunk_summary") or {}
        if (summary.get("chunk_count") or 0) < 2:  # one chunk has no steady state
            return None
        return _number(summary.get(name))

    return read


def _steady_fps(report: Report) -> float | None:
    steady = (report.get("chunks") or [])[1:]
    frames = sum(int(c.get("frames") or 0) for c in steady)
    ms = sum(float(c.get("total_ms") or 0) for c in steady)
    return round(frames / (ms / 1000), 3) if frames and ms > 0 else None


def _ttff(report: Report) -> float | None:
    start, first = report.get("generate_started_at"), report.get("first_frame_at")
    if not start or not first:
        return None
    delta = datetime.fromisoformat(first) - datetime.fromisoformat(start)
    return round(delta.total_seconds() * 1000, 3)


def _step(report: Report) -> float | None:
    steps = [s for s in report.get("step_ms") or [] if isinstance(s, int | float)]
    return round(statistics.median(steps), 3) if steps else None


def _memory(name: str) -> Callable[[Report], float | None]:
    return lambda r: _number((r.get("memory") or {}).get(name))


@dataclass(frozen=True)
class Metric:
    """A tracked figure: how to read it, which way is better, and which runs count."""

    name: str
    label: str
    unit: str
    better: Literal["lower", "higher"]
    runs: Literal["warm", "cold", "all"]
    read: Callable[[Report], float | None] = field(repr=False)
    floor: float | None = None  # a metric's own smallest flagged change, if not the spec's


METRICS: dict[str, Metric] = {
    m.name: m
    for m in [
        Metric("generate_ms", "generate time", "ms", "lower", "warm", _timing("generate_ms")),
        Metric("render_fps", "render fps", "fps", "higher", "warm", lambda r: _number(r.get("render_fps"))),
        Metric("rtf", "RTF", "", "lower", "warm", lambda r: _number(r.get("rtf"))),
        Metric("ttff_ms", "time to first frame", "ms", "lower", "warm", _ttff),
        Metric(
            "steady_chunk_core_ms",
            "steady chunk core",
            "ms",
            "lower",
            "warm",
            _steady("steady_chunk_core_ms_avg"),
        ),
        Metric(
            "steady_chunk_total_ms",
            "steady chunk total",
            "ms",
            "lower",
            "warm",
            _steady("steady_chunk_total_ms_avg"),
        ),
        Metric("steady_fps", "steady fps", "fps", "higher", "warm", _steady_fps),
        Metric("step_ms", "denoising step", "ms", "lower", "warm", _step),
        Metric("total_ms", "run time", "ms", "lower", "warm", _timing("total_ms")),
        Metric("cold_start_ms", "cold start", "ms", "lower", "cold", _timing("total_ms")),
        Metric("load_ms", "model load", "ms", "lower", "cold", _timing("load_ms")),
        Metric("peak_mb", "peak device memory", "MB", "lower", "all", _memory("peak_mb"), floor=0.05),
        Metric("peak_rss_mb", "peak host memory", "MB", "lower", "all", _memory("peak_rss_mb"), floor=0.05),
    ]
}

DEFAULT_METRICS = (
    "generate_ms",
    "render_fps",
    "rtf",
    "ttff_ms",
    "steady_chunk_core_ms",
    "cold_start_ms",
    "peak_mb",
    "peak_rss_mb",
)


@dataclass
class RunFacts:
    """What one finished job contributes to its case."""

    job_id: str
    repeat: int
    status: str
    error_code: str | None
    verdict: str | None
    cold: bool
    values: dict[str, float]
    frames_digest: str | None = None
    frame_hashes: list[str] = field(default_factory=list)
    output_sha256: str | None = None
    media_duration_s: float | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def as_dict(self, *, with_hashes: bool = False) -> dict[str, Any]:
        """JSON-ready; per-frame hashes only when asked (they are long)."""
        out = {
            "job_id": self.job_id,
            "repeat": self.repeat,
            "status": self.status,
            "error_code": self.error_code,
            "verdict": self.verdict,
            "cold": self.cold,
            "values": self.values,
            "frames_digest": self.frames_digest,
            "output_sha256": self.output_sha256,
            "media_duration_s": self.media_duration_s,
            "info": self.info,
        }
        if with_hashes:
            out["frame_hashes"] = self.frame_hashes
        return out


def frames_digest(frame_hashes: list[str]) -> str | None:
    """One digest over a run's per-frame hashes (None when the run recorded none)."""
    if not frame_hashes:
        return None
    return hashlib.sha256("\n".join(frame_hashes).encode()).hexdigest()


def run_facts(
    report: Report | None,
    *,
    job_id: str,
    repeat: int,
    status: str,
    error_code: str | None,
    verdict: str | None,
    cold: bool | None,
) -> RunFacts:
    """Read every known metric (and the output's fingerprints) from one job's report."""
    report = report or {}
    values: dict[str, float] = {}
    for metric in METRICS.values():
        value = metric.read(report) if report else None
        if value is not None:
            values[metric.name] = value
    hashes = [str(h) for h in report.get("frame_hashes") or []]
    video: dict[str, Any] = next((a for a in report.get("artifacts") or [] if a.get("kind") == "video"), {})
    validation = report.get("validation") or {}
    probe_video = (validation.get("probe") or {}).get("video") or {}
    placement = report.get("device_placement") or {}
    info = {
        "backend": report.get("backend"),
        "device": placement.get("device"),
        "worker_id": report.get("worker_id"),
        "width": probe_video.get("width") or video.get("width"),
        "height": probe_video.get("height") or video.get("height"),
        "fps": probe_video.get("fps"),
        "frames": report.get("frames_generated"),
        "versions": report.get("versions") or {},
    }
    return RunFacts(
        job_id=job_id,
        repeat=repeat,
        status=status,
        error_code=error_code,
        verdict=verdict,
        cold=bool(report.get("cold_start", cold or False)),
        values=values,
        frames_digest=frames_digest(hashes),
        frame_hashes=hashes,
        output_sha256=video.get("sha256"),
        media_duration_s=_number((validation.get("probe") or {}).get("duration_s"))
        or _number(report.get("media_duration_s")),
        info=info,
    )


def samples_of(runs: list[RunFacts], metric: Metric) -> list[float]:
    """The values of ``metric`` over the runs that count for it (warm, cold or all succeeded runs)."""
    out = []
    for run in runs:
        if run.status != "succeeded" or metric.name not in run.values:
            continue
        if (metric.runs == "warm" and run.cold) or (metric.runs == "cold" and not run.cold):
            continue
        out.append(run.values[metric.name])
    return out
