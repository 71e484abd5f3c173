"""``jobservice submit`` and ``jobservice status``: the CLI's side of ``jobservice.client``.

The calls go through ``jobservice.client.Client`` (retries, idempotency keys, the live stream with
polling as the fallback); this module turns its refusals into one-line CLI errors and draws the
progress line and the summary people read.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import requests

from jobservice.client import ApiError, Client, JobView, UploadId, WaitTimeout
from jobservice.fleet.views import eta_words

MAIN_STAGES = ("queue_wait", "fetch", "load", "generate", "encode", "validate", "upload", "total")


class ClientError(click.ClickException):
    """An API refusal, shown as its code and sentence."""


@contextlib.contextmanager
def clear_errors(base_url: str) -> Iterator[None]:
    """API refusals and unreachable servers as one-line CLI errors (exit 1), not tracebacks."""
    try:
        yield
    except ApiError as exc:
        raise ClientError(str(exc)) from None
    except requests.RequestException as exc:
        raise ClientError(f"cannot reach {base_url}: {exc.__class__.__name__}") from None


def client_for(base_url: str) -> Client:
    """A client of the API at ``base_url``, with the key in JOBSERVICE_API_KEY when set."""
    return Client(base_url, timeout=120.0)


def submit(
    base_url: str,
    *,
    task: str | None,
    model: str | None,
    params: dict[str, Any],
    image: Path | None,
    audio: Path | None,
    idempotency_key: str | None = None,
    upload_above: int | None = None,
) -> dict[str, Any]:
    """POST /jobs (JSON for text2video, multipart when files are sent), with an Idempotency-Key;
    files larger than ``upload_above`` bytes go first as direct uploads (POST /uploads), with a
    progress line, and the job names them."""
    with clear_errors(base_url), client_for(base_url) as api:
        image_in = _direct(api, image, upload_above)
        audio_in = _direct(api, audio, upload_above)
        job = api.submit(
            task=task, model=model, image=image_in, audio=audio_in, idempotency_key=idempotency_key, **params
        )
    return job.model_dump(mode="json")


def _direct(api: Client, path: Path | None, above: int | None) -> Path | UploadId | None:
    """``path`` as an upload id when it is larger than ``above`` bytes, else as it is."""
    if path is None or above is None or path.stat().st_size <= above:
        return path

    def draw(sent: int, total: int) -> None:
        sys.stderr.write(
            f"\ruploading {path.name}: {sent * 100 // max(total, 1):3d}% of {total / 2**20:.1f} MB"
        )
        if sent >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return api.upload(path, on_progress=draw)


def get_job(base_url: str, job_id: str) -> dict[str, Any]:
    """GET /jobs/<id>."""
    with clear_errors(base_url), client_for(base_url) as api:
        return api.get(job_id).model_dump(mode="json")


def delete_job(base_url: str, job_id: str) -> dict[str, Any]:
    """DELETE /jobs/<id>."""
    with clear_errors(base_url), client_for(base_url) as api:
        return api.delete(job_id).model_dump(mode="json")


def wait_for(base_url: str, job_id: str, *, timeout: float, show_progress: bool = True) -> dict[str, Any]:
    """Follow the job until it ends (its live stream, or polling), drawing a progress line on stderr."""
    shown = [""]
    previews = [0]

    def draw(view: JobView) -> None:
        job = view.model_dump(mode="json")
        number = _preview_number(job)
        if number > previews[0]:  # a new preview: its own line, above the progress line
            previews[0] = number
            if shown[0]:
                sys.stderr.write("\n")
            sys.stderr.write(_preview_line(job, base_url) + "\n")
            shown[0] = ""
        shown[0] = _draw(job, shown[0])

    with clear_errors(base_url), client_for(base_url) as api:
        try:
            job = api.wait(job_id, timeout=timeout, on_update=draw if show_progress else None)
        except WaitTimeout as exc:
            status = getattr(exc.last, "status", "unfinished")
            raise ClientError(f"job {job_id} still {status} after {timeout:.0f} s") from None
    if show_progress and shown[0]:
        sys.stderr.write("\n")
    return job.model_dump(mode="json")


def draw_progress(label: str, fraction: float, words: str, previous: str) -> str:
    """Redraw the progress line ``label [####......]  42.0% words`` on stderr when it changed from
    ``previous``: in place on a terminal, a new line otherwise; returns the line now shown."""
    width = 30
    done = int(width * fraction)
    line = f"{label} [{'#' * done}{'.' * (width - done)}] {fraction * 100:5.1f}% {words}"
    if line != previous:
        lead = "\r" if sys.stderr.isatty() else ("\n" if previous else "")
        sys.stderr.write(lead + line)
        sys.stderr.flush()
    return line


def _draw(job: dict[str, Any], previous: str) -> str:
    """A job's progress line: its stage, and its place in the queue or its end."""
    where = job["stage"]
    now = datetime.now(UTC)
    if job["status"] == "queued" and job.get("queue_position") is not None:
        where = f"queued, {job['queue_position']} to start before it"
        eta = eta_words(_moment(job.get("estimated_start_at")), now)
        if eta:
            where += f", {eta}"
        if job.get("fair_share"):
            where += f" ({job['fair_share']['text']})"
        revisions = job.get("eta_revisions") or []
        if revisions:
            where += f"; moved: {revisions[-1]['cause']}"
    elif job["status"] == "running":
        eta = eta_words(_moment(job.get("estimated_finish_at")), now, verb="ends")
        if eta:
            where += f", {eta}"
    return draw_progress(job["id"][:8], float(job.get("progress") or 0), f"{where:<40}", previous)


def _preview_number(job: dict[str, Any]) -> int:
    preview = job.get("preview") or {}
    return int(preview.get("number") or 0) if preview.get("state") == "ready" else 0


def _preview_line(job: dict[str, Any], base_url: str) -> str:
    """A running job's preview as one line: what it covers and where it plays."""
    preview = job.get("preview") or {}
    if preview.get("state") == "none":
        return f"  preview: none ({preview.get('message')})"
    if preview.get("state") != "ready":
        return "  preview: none yet"
    seconds = preview.get("seconds")
    span = f"{seconds:.1f} s" if isinstance(seconds, int | float) else "so far"
    link = (job.get("links") or {}).get("preview", "")
    return f"  preview {preview['number']} ({span}, not yet validated): {base_url.rstrip('/')}{link}"


def _moment(raw: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(raw)) if raw else None
    except ValueError:
        return None


def describe(job: dict[str, Any], base_url: str) -> str:
    """A human summary of a finished (or running) job."""
    lines = [f"job {job['id']}: {job['status']} ({job['model']}, attempt {job['attempts']})"]
    if job.get("error"):
        lines.append(f"  error: {job['error']['code']}: {job['error']['message']}")
    if job.get("validation"):
        v = job["validation"]
        failed = f" (failed: {', '.join(v['failed_checks'])})" if v.get("failed_checks") else ""
        lines.append(f"  validation: {v['verdict']}{failed}")
    tries = job.get("validation_attempts") or []
    if tries:
        earlier = "; ".join(
            f"try {t['number']} seed {t['seed']} {t['verdict']} ({', '.join(t['failed_checks']) or '-'})"
            for t in tries
        )
        lines.append(f"  tries: {earlier}; try {len(tries) + 1} seed {job.get('seed_used')}: this one")
    timings = job.get("timings") or {}
    shown = [
        f"{name}={timings[name + '_ms']:.0f}ms"
        for name in MAIN_STAGES
        if isinstance(timings.get(name + "_ms"), int | float)
    ]
    if shown:
        lines.append("  timings: " + " ".join(shown))
    figures = [f"{k}={timings[k]}" for k in ("render_fps", "rtf") if timings.get(k) is not None]
    if figures:
        lines.append(
            "  speed: " + " ".join(figures) + (" (cold start)" if job.get("cold_start") else " (warm)")
        )
    usage = job.get("usage") or {}
    if usage.get("card_seconds") is not None:
        phases = usage.get("phases") or {}
        parts = ", ".join(f"{k} {v:.1f}" for k, v in phases.items() if v)
        wasted = (
            f"; {usage['wasted_card_seconds']:.1f} lost by the service"
            if usage.get("wasted_card_seconds")
            else ""
        )
        lines.append(f"  usage: {usage['card_seconds']:.1f} card-seconds ({parts}){wasted}")
    links = job.get("links") or {}
    if job.get("preview"):
        lines.append(_preview_line(job, base_url))
    if "video" in links:
        lines.append(f"  video: {base_url.rstrip('/')}{links['video']}")
    if "report" in links:
        lines.append(f"  report: {base_url.rstrip('/')}{links['report']}")
    return "\n".join(lines)


def download(base_url: str, job: dict[str, Any], dest: Path) -> Path:
    """Save the job's video to ``dest``."""
    with clear_errors(base_url), client_for(base_url) as api:
        return api.download(job["id"], dest)
