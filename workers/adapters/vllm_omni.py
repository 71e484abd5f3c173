"""Wan2.1 text2video on vLLM-Omni: an HTTP client of a pool of ``vllm-omni serve`` instances.

The server's contract (reference/seed-systems.md 4): multipart form fields on ``POST /v1/videos``
(async: a VideoResponse, then ``GET /v1/videos/{id}`` until ``completed`` and ``GET
/v1/videos/{id}/content``; ``DELETE`` cancels) or ``POST /v1/videos/sync`` (the MP4 itself, with
``X-Inference-Time-S``, ``X-Stage-Durations`` and ``X-Peak-Memory-MB``; 504 after 600 s). Each
instance runs one request at a time, so a job first takes an idle instance from the pool
(workers/adapters/processes/instance_pool.py). The client keeps its own deadline (the job's timeout): a
server that swallows an out-of-memory error and stays ``in_progress`` forever (vllm-omni #2327)
cannot hold a worker. A two-card CFG-parallel instance is one card group: its worker is
launched on those cards and its entry (or its group's override) names that instance.

With ``serve_command`` the worker starts the server itself, on its own cards (it inherits the
worker's pinning), in ``load``: it waits for ``GET /health`` (vLLM's readiness) while checking that
the process is alive, and ``unload`` stops its whole process group, so the fleet can evict the model
and give the cards' memory to another. Only this worker sends to that server.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from jobservice.families.vllm_omni import VllmOmniEntry
from workers.adapters.base import (
    Adapter,
    AdapterError,
    DeviceContext,
    JobInputs,
    RunContext,
    RunOutput,
    VideoFormat,
)
from workers.adapters.entries import deployment_entry
from workers.adapters.processes.child import (
    ChildProcess,
    ChildStartError,
    append_line,
    last_lines,
    run_abandonable,
)
from workers.adapters.processes.http_client import call, download, error_for, make_session
from workers.adapters.processes.instance_pool import InstancePool, Lease
from workers.adapters.processes.memory import is_out_of_memory

SYNC_TIMEOUT = 660.0  # the server's own limit is 600 s (then 504); a little more for the transfer
FORM_FIELDS = (
    "prompt",
    "negative_prompt",
    "width",
    "height",
    "num_frames",
    "fps",
    "num_inference_steps",
    "guidance_scale",
    "flow_shift",
    "seed",
)


class _NotAccepted(AdapterError):
    """The instance could not be reached before it accepted the job: another one may be tried."""


@dataclass
class VllmHandle:
    """The entry, the pool and an HTTP session (and the worker's own server, when it started one)."""

    entry: VllmOmniEntry
    pool: InstancePool
    session: requests.Session
    owner: str
    server: ChildProcess | None = None

    @property
    def endpoints(self) -> list[str]:
        """The instances jobs may go to."""
        return self.pool.endpoints


def serve_argv(entry: VllmOmniEntry) -> list[str]:
    """The server's argv with ``{port}`` filled in."""
    return [part.replace("{port}", str(entry.serve_port)) for part in entry.serve_command or []]


def start_server(entry: VllmOmniEntry, session: requests.Session, state_dir: Path) -> ChildProcess:
    """Start the worker's own server and wait until it answers ``/health``; a server that exits or
    stays unready past ``serve_startup_timeout`` fails the load with its log's last lines."""
    endpoint = f"http://127.0.0.1:{entry.serve_port}"
    log_path = state_dir / f"vllm-serve-{entry.serve_port}.log"
    try:
        server = ChildProcess(
            serve_argv(entry), log_path=log_path, env={**os.environ, **entry.env}, name="vllm serve"
        )
    except ChildStartError as exc:
        raise AdapterError("model_load_failed", str(exc)) from None
    deadline = time.monotonic() + entry.serve_startup_timeout
    while True:
        code = server.poll()
        if code is not None:
            tail = last_lines(server.log_tail())
            raise AdapterError(
                "model_load_failed",
                f"The vLLM-Omni server exited with status {code} before it was ready: {tail}",
            )
        try:
            if session.get(f"{endpoint}/health", timeout=2.0).status_code == 200:
                return server
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise AdapterError(
                "model_load_failed",
                f"The vLLM-Omni server was not ready after {entry.serve_startup_timeout:g} s: "
                f"{last_lines(server.log_tail())}",
            )
        time.sleep(0.5)


def form_fields(params: dict[str, Any], entry: VllmOmniEntry) -> dict[str, str]:
    """The multipart form of a request (every value a string, as curl -F sends it)."""
    fields = {k: str(params[k]) for k in FORM_FIELDS if params.get(k) not in (None, "")}
    if entry.served_model:
        fields["model"] = entry.served_model
    return fields


class VllmOmniAdapter(Adapter):
    """Sends each job to an idle vLLM-Omni instance and validates the MP4 it returns."""

    model_ids = ("wan2.1-t2v-1.3b",)
    execution_mode = "http"

    def __init__(self, *, redis: Any | None = None) -> None:
        # Collaborator: tests may hand in a client; by default the worker's broker is used.
        self._redis = redis

    def load(self, device: DeviceContext, params: dict[str, Any] | None = None) -> VllmHandle:
        """Read the entry and connect to the lease store; with ``serve_command``, start the worker's
        own server on its cards and wait until it is ready (the model's cold load)."""
        entry, runtime = deployment_entry("wan2.1-t2v-1.3b", params, VllmOmniEntry)
        session = make_session(entry.api_key)
        if entry.serve_command:
            state_dir = Path(runtime.get("state_dir") or "var/workers") / "vllm-omni"
            state_dir.mkdir(parents=True, exist_ok=True)
            server = start_server(entry, session, state_dir)
            local = [f"http://127.0.0.1:{entry.serve_port}"]
            owner = str(runtime.get("worker_id") or "worker")
            return VllmHandle(
                entry=entry, pool=InstancePool(local, redis=None), session=session, owner=owner, server=server
            )
        redis = self._redis
        if redis is None and runtime.get("broker_url"):
            from jobservice.broker import redis_client

            redis = redis_client(runtime["broker_url"], sentinel_master=runtime.get("broker_sentinel_master"))
        return VllmHandle(
            entry=entry,
            pool=InstancePool(entry.endpoints, redis=redis),
            session=session,
            owner=str(runtime.get("worker_id") or "worker"),
        )

    def unload(self, handle: Any) -> None:
        """Stop the worker's own server (its whole process group), which gives its cards back."""
        vh: VllmHandle = handle
        if vh.server is not None:
            vh.server.stop(grace=15.0)
            vh.server = None
        vh.session.close()

    def run(self, handle: Any, inputs: JobInputs, ctx: RunContext) -> RunOutput:
        """Take an idle instance, generate there, release it; unreachable instances are skipped."""
        vh: VllmHandle = handle
        entry, params = vh.entry, inputs.params
        dest = inputs.scratch / "vllm-output.mp4"
        fields = form_fields(params, entry)
        ctx.add_extra("vllm_request", {"mode": entry.mode, "form": fields})
        if vh.server is None:  # the operator's server keeps the model loaded; its start is not ours
            ctx.set_cold_start(False)
        tried: set[str] = set()
        while True:
            waited = time.perf_counter()
            lease = vh.pool.acquire(
                owner=vh.owner, check_cancel=ctx.check_cancel, timeout=entry.acquire_timeout
            )
            ctx.add_timing("instance_wait_ms", (time.perf_counter() - waited) * 1000)
            append_line(ctx.job_log(), f"vllm-omni: using instance {lease.endpoint}")
            try:
                if entry.mode == "sync":
                    self._sync(vh, lease, fields, dest, ctx)
                else:
                    self._async(vh, lease, fields, dest, ctx)
                lease.release()
                break
            except _NotAccepted as exc:
                lease.release()
                vh.pool.mark_down(lease.endpoint)
                tried.add(lease.endpoint)
                append_line(ctx.job_log(), f"vllm-omni: {exc.message}")
                if tried >= set(vh.endpoints):
                    raise AdapterError("instance_unreachable", exc.message) from None
            except BaseException:
                lease.release()
                raise
        ctx.add_extra("instance", lease.endpoint)
        if not dest.exists() or dest.stat().st_size == 0:
            raise AdapterError("output_empty", f"vLLM-Omni at {lease.endpoint} returned no video bytes.")
        frames, fps = int(params["num_frames"]), float(params["fps"])
        return RunOutput(
            frames_generated=frames,
            media_duration_s=frames / fps,
            video_path=dest,
            expected=VideoFormat(
                width=int(params["width"]), height=int(params["height"]), fps=fps, num_frames=frames
            ),
        )

    # --- POST /v1/videos/sync ---------------------------------------------------------------
    def _sync(
        self, vh: VllmHandle, lease: Lease, fields: dict[str, str], dest: Path, ctx: RunContext
    ) -> None:
        url, what = f"{lease.endpoint}/v1/videos/sync", f"vLLM-Omni at {lease.endpoint}"

        def post() -> requests.Response:
            response = call(
                vh.session,
                "POST",
                url,
                files=_multipart(fields),
                timeout=SYNC_TIMEOUT,
                what=what,
                stream=True,
            )
            with response:
                if response.status_code == 200:
                    with dest.open("wb") as out:
                        for block in response.iter_content(1 << 20):
                            out.write(block)
                else:
                    _ = response.content  # read the error body before the connection closes
            return response

        try:
            response = run_abandonable(
                post, check_cancel=ctx.check_cancel, on_abandon=lease.release_when_done
            )
        except AdapterError as exc:
            if exc.code == "instance_unreachable":
                raise _NotAccepted(exc.code, exc.message) from None
            raise
        if response.status_code != 200:
            raise error_for(response, what=what)
        headers = response.headers
        _telemetry(
            ctx,
            inference_s=headers.get("X-Inference-Time-S"),
            stages=_json_or_none(headers.get("X-Stage-Durations")),
            peak_mb=headers.get("X-Peak-Memory-MB"),
        )
        ctx.add_extra("request_id", headers.get("X-Request-Id"))

    # --- POST /v1/videos + polling ---------------------------------------------------------------
    def _async(
        self, vh: VllmHandle, lease: Lease, fields: dict[str, str], dest: Path, ctx: RunContext
    ) -> None:
        base, what = f"{lease.endpoint}/v1/videos", f"vLLM-Omni at {lease.endpoint}"
        try:
            response = call(vh.session, "POST", base, files=_multipart(fields), timeout=60.0, what=what)
        except AdapterError as exc:
            if exc.code == "instance_unreachable":
                raise _NotAccepted(exc.code, exc.message) from None
            raise
        if response.status_code not in (200, 201, 202):
            raise error_for(response, what=what)
        video = response.json()
        video_id = str(video["id"])
        ctx.add_extra("request_id", video_id)
        append_line(ctx.job_log(), f"vllm-omni: accepted as {video_id} ({video.get('status')})")
        try:
            video = self._poll(vh, f"{base}/{video_id}", video, ctx, entry=vh.entry, what=what)
            download(vh.session, f"{base}/{video_id}/content", dest, timeout=300.0, what=what)
        except BaseException:
            # Canceled, timed out or failed: stop the server's work and free its storage.
            try:
                call(vh.session, "DELETE", f"{base}/{video_id}", timeout=10.0, what=what)
                append_line(ctx.job_log(), f"vllm-omni: deleted {video_id}")
            except AdapterError as exc:
                append_line(ctx.job_log(), f"vllm-omni: could not delete {video_id}: {exc.message}")
            raise
        _telemetry(
            ctx,
            inference_s=video.get("inference_time_s"),
            stages=video.get("stage_durations"),
            peak_mb=video.get("peak_memory_mb"),
        )

    def _poll(
        self,
        vh: VllmHandle,
        url: str,
        video: dict[str, Any],
        ctx: RunContext,
        *,
        entry: VllmOmniEntry,
        what: str,
    ) -> dict[str, Any]:
        while True:
            status = video.get("status")
            if status == "completed":
                return video
            if status == "failed":
                error = video.get("error") or {}
                message = str(error.get("message") or error or "no reason given")
                code = "out_of_memory" if is_out_of_memory(message) else "model_error"
                raise AdapterError(code, f"{what}: generation failed: {message}")
            if video.get("progress") is not None:
                ctx.progress(min(0.99, float(video["progress"]) / 100.0))
            _sleep(entry.poll_interval, ctx)
            response = call(vh.session, "GET", url, timeout=30.0, what=what)
            try:
                video = response.json()
            except ValueError:
                raise error_for(response, what=what) from None
            if response.status_code != 200 and video.get("status") != "failed":
                raise error_for(response, what=what)


def _multipart(fields: dict[str, str]) -> dict[str, tuple[None, str]]:
    # (None, value) makes requests send a plain form field in multipart/form-data, as curl -F does.
    return {name: (None, value) for name, value in fields.items()}


def _sleep(seconds: float, ctx: RunContext) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ctx.check_cancel()
        time.sleep(min(0.2, max(0.0, end - time.monotonic())))


def _json_or_none(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def _telemetry(ctx: RunContext, *, inference_s: Any, stages: Any, peak_mb: Any) -> None:
    """The server's figures, in our units: timings in ms (stage keys ending _ms are ms already)."""
    if _number(inference_s) is not None:
        ctx.add_timing("server_inference_ms", float(inference_s) * 1000)
    if isinstance(stages, dict):
        for name, value in stages.items():
            if _number(value) is None:
                continue
            key = re.sub(r"[^0-9a-zA-Z]+", "_", str(name)).strip("_").lower()
            ms = float(value) if key.endswith("_ms") else float(value) * 1000
            ctx.add_timing(f"server_{key.removesuffix('_ms')}_ms", ms)
    if _number(peak_mb) is not None:
        ctx.add_memory("server_peak_mb", float(peak_mb))


def _number(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


__all__ = ["VllmOmniAdapter", "form_fields"]
