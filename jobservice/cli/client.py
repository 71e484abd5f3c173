"""``jobservice submit`` and ``jobservice status``: a small HTTP client of the API."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import IO, Any

import click
import requests

TERMINAL = {"succeeded", "failed", "canceled"}
MAIN_STAGES = ("queue_wait", "fetch", "load", "generate", "encode", "validate", "upload", "total")


class ClientError(click.ClickException):
    """An API refusal, shown as its code and sentence."""


def auth_headers() -> dict[str, str]:
    """``Authorization: Bearer`` from JOBSERVICE_API_KEY, when set (a service with API keys on)."""
    key = os.environ.get("JOBSERVICE_API_KEY", "").strip()
    return {"Authorization": f"Bearer {key}"} if key else {}


def _raise_for(response: requests.Response) -> None:
    if response.status_code < 400:
        return
    try:
        error = response.json()["error"]
        message = f"{response.status_code} {error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        message = f"{response.status_code}: {response.text[:300]}"
    raise ClientError(message)


def submit(
    base_url: str,
    *,
    task: str | None,
    model: str | None,
    params: dict[str, Any],
    image: Path | None,
    audio: Path | None,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """POST /jobs: JSON for text2video, multipart when files are sent."""
    headers = auth_headers()
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    url = f"{base_url.rstrip('/')}/jobs"
    if image is None and audio is None:
        body = {k: v for k, v in {"task": task, "model": model, **params}.items() if v is not None}
        response = requests.post(url, json=body, headers=headers, timeout=60)
    else:
        fields = {k: str(v) for k, v in {"task": task, "model": model, **params}.items() if v is not None}
        with contextlib.ExitStack() as stack:
            files: dict[str, tuple[str, IO[bytes]]] = {}
            for name, path in (("image", image), ("audio", audio)):
                if path is not None:
                    files[name] = (path.name, stack.enter_context(path.open("rb")))
            response = requests.post(url, data=fields, files=files, headers=headers, timeout=300)
    _raise_for(response)
    return response.json()


def get_job(base_url: str, job_id: str) -> dict[str, Any]:
    """GET /jobs/<id>."""
    response = requests.get(f"{base_url.rstrip('/')}/jobs/{job_id}", headers=auth_headers(), timeout=30)
    _raise_for(response)
    return response.json()


def wait_for(base_url: str, job_id: str, *, timeout: float, show_progress: bool = True) -> dict[str, Any]:
    """Poll until the job finishes, drawing a one-line progress bar on stderr."""
    deadline = time.monotonic() + timeout
    job = get_job(base_url, job_id)
    shown = ""
    while job["status"] not in TERMINAL:
        if time.monotonic() > deadline:
            raise ClientError(f"job {job_id} still {job['status']} after {timeout:.0f} s")
        if show_progress:
            shown = _draw(job, shown)
        time.sleep(0.5)
        job = get_job(base_url, job_id)
    if show_progress:
        _draw(job, shown)
        sys.stderr.write("\n")
    return job


def _draw(job: dict[str, Any], previous: str) -> str:
    """Redraw the progress line when it changed: in place on a terminal, a new line otherwise."""
    width = 30
    done = int(width * float(job.get("progress") or 0))
    where = job["stage"]
    if job["status"] == "queued" and job.get("queue_position") is not None:
        where = f"queued, {job['queue_position']} ahead"
    line = f"{job['id'][:8]} [{'#' * done}{'.' * (width - done)}] {job['progress'] * 100:5.1f}% {where:<24}"
    if line != previous:
        lead = "\r" if sys.stderr.isatty() else ("\n" if previous else "")
        sys.stderr.write(lead + line)
        sys.stderr.flush()
    return line


def describe(job: dict[str, Any], base_url: str) -> str:
    """A human summary of a finished (or running) job."""
    lines = [f"job {job['id']}: {job['status']} ({job['model']}, attempt {job['attempts']})"]
    if job.get("error"):
        lines.append(f"  error: {job['error']['code']}: {job['error']['message']}")
    if job.get("validation"):
        v = job["validation"]
        failed = f" (failed: {', '.join(v['failed_checks'])})" if v.get("failed_checks") else ""
        lines.append(f"  validation: {v['verdict']}{failed}")
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
    links = job.get("links") or {}
    if "video" in links:
        lines.append(f"  video: {base_url.rstrip('/')}{links['video']}")
    if "report" in links:
        lines.append(f"  report: {base_url.rstrip('/')}{links['report']}")
    return "\n".join(lines)


def download(base_url: str, job: dict[str, Any], dest: Path) -> Path:
    """Save the job's video to ``dest``."""
    with requests.get(
        f"{base_url.rstrip('/')}{job['links']['video']}", headers=auth_headers(), stream=True, timeout=120
    ) as response:
        _raise_for(response)
        with dest.open("wb") as handle:
            for block in response.iter_content(1 << 20):
                handle.write(block)
    return dest
