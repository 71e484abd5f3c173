"""The figures a batch tracks, read from each job's RunReport.

Definitions follow the seed benchmark documents: cold and warm are never mixed, "steady" chunk
figures exclude chunk 0, ``render_fps`` is frames per second of generation time and ``rtf`` is
generation time over media duration.

Cold and warm: a back end that keeps its model loaded (a resident one) has one cold run, the one
that loaded it, and warm ones; a run's own figures (generate time, fps, RTF, first frame, chunks)
are taken from its warm runs, and the cold run is measured as "cold start". A back end that loads
the model in every run (FlashHead's script, OmniRT's CLI: the report's ``model_residency`` is
``per_run``) has only cold runs, and the seed tables are made of exactly those: its run figures are
taken from every run and labelled cold. A case's ``figures`` says which; comparisons never mix them.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from jobservice.reports.run_report import model_residency_of

Report = dict[str, Any]
Figures = Literal["warm", "cold", "mixed"]


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


def _first_chunk(report: Report) -> float | None:
    chunks = report.get("chunks") or []
    return _number(chunks[0].get("total_ms")) if chunks else None


def _ttff(report: Report) -> float | None:
    start, first = report.get("generate_started_at"), report.get("first_frame_at")
    if not start or not first:
        return None
    delta = datetime.fromisoformat(first) - datetime.fromisoformat(start)
    return round(delta.total_seconds() * 1000, 3)


def _step(report: Report) -> float | None:
    steps = [s for s in report.get("step_ms") or [] if isinstance(s, int | float)]
    return round(statistics.median(steps), 3) if steps else None


def _memory(*names: str) -> Callable[[Report], float | None]:
    """The first of ``names`` the report's memory block has (a back end's own figure as fallback)."""

    def read(report: Report) -> float | None:
        memory = report.get("memory") or {}
        return next((v for v in (_number(memory.get(n)) for n in names) if v is not None), None)

    return read


@dataclass(frozen=True)
class Metric:
    """A tracked figure: how to read it, which way is better, and which runs count.

    ``runs``: "run" for a run's own figures (warm runs of a resident back end, every run of one
    that loads the model per run), "cold" for the runs that loaded the model, "all" for every run.
    ``missing`` says why a report without the figure has none (the export's "n/a (why)").
    """

    name: str
    label: str
    unit: str
    better: Literal["lower", "higher"]
    runs: Literal["run", "cold", "all"]
    read: Callable[[Report], float | None] = field(repr=False)
    floor: float | None = None  # a metric's own smallest flagged change, if not the spec's
    missing: str = "not in this back end's reports"


_NO_CHUNKS = "no chunk telemetry: the back end does not generate in chunks, or does not report them"
_NO_FRAMES = "the back end hands over a finished video: no frame is seen before the run ends"

METRICS: dict[str, Metric] = {
    m.name: m
    for m in [
        Metric("generate_ms", "generate time", "ms", "lower", "run", _timing("generate_ms")),
        Metric("render_fps", "render fps", "fps", "higher", "run", lambda r: _number(r.get("render_fps"))),
        Metric("rtf", "RTF", "", "lower", "run", lambda r: _number(r.get("rtf"))),
        Metric("ttff_ms", "time to first frame", "ms", "lower", "run", _ttff, missing=_NO_FRAMES),
        Metric(
            "steady_chunk_core_ms",
            "steady chunk core",
            "ms",
            "lower",
            "run",
            _steady("steady_chunk_core_ms_avg"),
            missing=_NO_CHUNKS,
        ),
        Metric(
            "steady_chunk_total_ms",
            "steady chunk total",
            "ms",
            "lower",
            "run",
            _steady("steady_chunk_total_ms_avg"),
            missing=_NO_CHUNKS,
        ),
        Metric("steady_fps", "steady fps", "fps", "higher", "run", _steady_fps, missing=_NO_CHUNKS),
        # Chunk 0 carries the warm-up (seeds/001: FlashTalk's script, chunk-0 6.59 s, then 0.89 s).
        Metric("first_chunk_ms", "first chunk", "ms", "lower", "run", _first_chunk, missing=_NO_CHUNKS),
        Metric("step_ms", "denoising step", "ms", "lower", "run", _step, missing="no per-step timings"),
        # OmniRT's own RunReport splits its run (seeds/000: denoise_loop_ms, export_ms).
        Metric(
            "denoise_loop_ms",
            "denoise loop",
            "ms",
            "lower",
            "run",
            _timing("omnirt_denoise_loop_ms"),
            missing="only OmniRT's own report has a denoise loop timing",
        ),
        Metric(
            "export_ms",
            "export",
            "ms",
            "lower",
            "run",
            _timing("omnirt_export_ms"),
            missing="only OmniRT's own report has an export timing",
        ),
        Metric("total_ms", "run time", "ms", "lower", "run", _timing("total_ms")),
        Metric("cold_start_ms", "cold start", "ms", "lower", "cold", _timing("total_ms")),
        Metric(
            "load_ms",
            "model load",
            "ms",
            "lower",
            "cold",
            _timing("load_ms"),
            missing="no separate load timing: the model loads inside the back end's own process",
        ),
        Metric(
            "peak_mb",
            "peak device memory",
            "MB",
            "lower",
            "all",
            # Ours (in-process models), else what OmniRT's or vLLM-Omni's own report says.
            _memory("peak_mb", "omnirt_peak_mb", "server_peak_mb"),
            floor=0.05,
            missing="no device memory figure: a cpu run, or the back end's own process is not measured",
        ),
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
    per_run: bool = False  # the back end loads the model in every run: all its figures are cold
    missing: dict[str, str] = field(default_factory=dict)  # why a metric has no value in this run
    frames_digest: str | None = None
    frame_hashes: list[str] = field(default_factory=list)
    output_sha256: str | None = None
    media_duration_s: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    host: dict[str, Any] | None = None  # what else ran on the host (the report's ``host``)

    def as_dict(self, *, with_hashes: bool = False) -> dict[str, Any]:
        """JSON-ready; per-frame hashes only when asked (they are long)."""
        out = {
            "job_id": self.job_id,
            "repeat": self.repeat,
            "status": self.status,
            "error_code": self.error_code,
            "verdict": self.verdict,
            "cold": self.cold,
            "model_residency": "per_run" if self.per_run else "resident",
            "values": self.values,
            "frames_digest": self.frames_digest,
            "output_sha256": self.output_sha256,
            "media_duration_s": self.media_duration_s,
            "info": self.info,
            "host": self.host,
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
    missing: dict[str, str] = {}
    for metric in METRICS.values():
        value = metric.read(report) if report else None
        if value is not None:
            values[metric.name] = value
        else:
            missing[metric.name] = _why_missing(metric, report)
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
        per_run=bool(report) and model_residency_of(report) == "per_run",
        missing=missing,
        frames_digest=frames_digest(hashes),
        frame_hashes=hashes,
        output_sha256=video.get("sha256"),
        media_duration_s=_number((validation.get("probe") or {}).get("duration_s"))
        or _number(report.get("media_duration_s")),
        info=info,
        host=report.get("host") if isinstance(report.get("host"), dict) else None,
    )


def _why_missing(metric: Metric, report: Report) -> str:
    """Why ``report`` has no value for ``metric``."""
    if not report:
        return "the run left no report"
    chunks = int((report.get("chunk_summary") or {}).get("chunk_count") or 0)
    if metric.name.startswith("steady_") and chunks == 1:
        return "one chunk: no steady state, chunk 0 is left out"
    if metric.name == "peak_mb" and (report.get("device_placement") or {}).get("device") == "cpu":
        return "a cpu run has no device memory"
    return metric.missing


def case_figures(case: dict[str, Any]) -> str:
    """The kind of a case's run figures; results stored before kinds existed had warm ones only."""
    return str(case.get("figures") or "warm")


def metric_figures(metric: Metric, case: dict[str, Any]) -> str | None:
    """The kind of ``metric``'s samples in ``case``: its run figures' kind, cold, or None (any run)."""
    if metric.runs == "run":
        return case_figures(case)
    return "cold" if metric.runs == "cold" else None


def counted(run: RunFacts, metric: Metric) -> bool:
    """Whether ``run`` is one of the runs ``metric`` is taken from (see the module's docstring)."""
    if metric.runs == "run":
        return run.per_run or not run.cold
    if metric.runs == "cold":
        return run.cold
    return True


def samples_of(runs: list[RunFacts], metric: Metric) -> list[float]:
    """The values of ``metric`` over the succeeded runs that count for it."""
    return [
        run.values[metric.name]
        for run in runs
        if run.status == "succeeded" and metric.name in run.values and counted(run, metric)
    ]


def figures_of(runs: list[RunFacts]) -> Figures | None:
    """Which kind a case's run figures are: warm (resident), cold (loaded per run), or mixed."""
    kinds = {
        "cold" if r.per_run else "warm" for r in runs if r.status == "succeeded" and (r.per_run or not r.cold)
    }
    if not kinds:
        return None
    return "mixed" if len(kinds) > 1 else kinds.pop()  # type: ignore[return-value]


def unavailable(runs: list[RunFacts], samples: dict[str, list[float]]) -> dict[str, str]:
    """For each metric without samples, why: no run succeeded, no run of the kind, or the back end."""
    good = [r for r in runs if r.status == "succeeded"]
    out: dict[str, str] = {}
    for name, metric in METRICS.items():
        if samples.get(name):
            continue
        taken = [r for r in good if counted(r, metric)]
        if not good:
            out[name] = "no run succeeded"
        elif not taken and metric.runs == "run":
            out[name] = "every run loaded the model (cold): warm figures need a run on a warm worker"
        elif not taken:
            out[name] = "no run loaded the model: the worker was warm"
        else:
            out[name] = taken[0].missing.get(name) or METRICS[name].missing
    return out
