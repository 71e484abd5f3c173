"""OmniRT: any OmniRT model through ``python -m omnirt generate ... --json`` or ``omnirt serve``.

CLI (reference/seed-systems.md 1.1): one JSON line on stdout, ``{"outputs": [Artifact...],
"metadata": RunReport}``; exit 2 is a request error (validation, or OmniRT's own memory budget),
1 a crash with a traceback. Server (1.5): ``POST /v1/generate`` with ``async_run: true``, then
``GET /v1/jobs/{id}`` until it ends (``DELETE`` cancels it while queued). Inputs and outputs are
paths the OmniRT process can see: the CLI runs here; a server on another host needs a shared
folder (``scratch_dir``) and ``path_map``.

A request's ``config`` adds keys to the deployment's ``config`` but never replaces one, and may
not name paths, launchers or cards at all (refused when the job is submitted; checked here again).

OmniRT checks nothing about the video it returns, so the file goes through our gate, which
expects what the job asked for (then what OmniRT says it made; the file itself is read only for
what neither says). Its RunReport is folded into ours (timings as ``omnirt_<stage>_ms``, its
memory, the whole report under ``extra.omnirt_report``). This is also how the OpenTalking models
(wav2lip, quicktalk, musetalk) are reached.
"""

from __future__ import annotations

import base64
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobservice.deployment_schema import OmniRTEntry
from jobservice.model_params import omnirt_deployment_keys
from jobservice.probe import ProbeError, probe_media
from workers.adapters.base import (
    Adapter,
    AdapterError,
    DeviceContext,
    JobInputs,
    RunContext,
    RunOutput,
    VideoFormat,
)
from workers.adapters.child import ChildProcess, ChildStartError, append_line, last_lines, tail_text
from workers.adapters.entries import deployment_entry
from workers.adapters.http_client import call, error_for, make_session
from workers.adapters.memory import is_out_of_memory
from workers.adapters.soulx_common import child_env, input_audio_duration

# Our parameter -> the CLI flag and the request-config key of OmniRT.
FLAGS = {
    "prompt": "--prompt",
    "negative_prompt": "--negative-prompt",
    "seed": "--seed",
    "width": "--width",
    "height": "--height",
    "num_frames": "--num-frames",
    "fps": "--fps",
    "num_inference_steps": "--num-inference-steps",
    "guidance_scale": "--guidance-scale",
    "preset": "--preset",
}
TERMINAL = {"succeeded", "failed", "cancelled", "canceled"}


@dataclass(frozen=True)
class OmniRTHandle:
    """The deployment entry and the card group."""

    entry: OmniRTEntry
    device: DeviceContext


class OmniRTAdapter(Adapter):
    """Runs one OmniRT request per job and validates the file it returns."""

    model_ids = ("omnirt",)
    execution_mode = "subprocess"

    def load(self, device: DeviceContext, params: dict[str, Any] | None = None) -> OmniRTHandle:
        """Read the deployment entry (OmniRT loads its models itself)."""
        entry, _ = deployment_entry("omnirt", params, OmniRTEntry)
        return OmniRTHandle(entry=entry, device=device)

    def run(self, handle: Any, inputs: JobInputs, ctx: RunContext) -> RunOutput:
        """One request; the artifact goes to the file gate."""
        omni: OmniRTHandle = handle
        entry, params = omni.entry, inputs.params
        config = request_config(entry, params.get("config") or {})
        ctx.add_extra(
            "omnirt_request", {"model": params["omnirt_model"], "mode": entry.mode, "config": config}
        )
        ctx.set_cold_start(entry.mode == "cli")  # a CLI run loads the model every time
        shared = entry.scratch_dir / inputs.job_id if entry.mode == "server" and entry.scratch_dir else None
        started = time.perf_counter()
        try:
            if entry.mode == "cli":
                result = self._run_cli(omni, inputs, ctx, config)
            else:
                result = self._run_server(omni, inputs, ctx, config)
            ctx.add_timing("omnirt_total_ms", (time.perf_counter() - started) * 1000)
            self._fold_report(result.get("metadata") or {}, ctx)
            video = self._artifact(result, inputs.scratch / "omnirt", entry)
            if shared is not None:  # the gate reads our own copy
                local = inputs.scratch / "omnirt" / Path(video["path"]).name
                local.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(video["path"], local)
                video["path"] = str(local)
        finally:
            # The shared folder is cleaned whatever happened (what a job we gave up on may still
            # write there is of no use to anyone).
            if shared is not None:
                shutil.rmtree(shared, ignore_errors=True)
        return self._output(video, inputs, entry)

    # --- CLI -------------------------------------------------------------------------------
    def _run_cli(
        self, omni: OmniRTHandle, inputs: JobInputs, ctx: RunContext, config: dict[str, Any]
    ) -> dict[str, Any]:
        entry, params = omni.entry, inputs.params
        out_dir = inputs.scratch / "omnirt"
        out_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            entry.python,
            "-m",
            "omnirt",
            "generate",
            "--task",
            self._task(inputs),
            "--model",
            params["omnirt_model"],
        ]
        argv += ["--backend", entry.omnirt_backend, "--output-dir", str(out_dir), "--json"]
        for name in ("image", "audio"):
            if name in inputs.files:
                argv += [f"--{name}", str(inputs.files[name].resolve())]
        for key, flag in FLAGS.items():
            if params.get(key) is not None:
                argv += [flag, str(params[key])]
        if config:
            config_path = out_dir / "request-config.json"
            config_path.write_text(json.dumps(config))
            argv += ["--config", str(config_path)]
        answer = out_dir / "stdout.json"
        try:
            child = ChildProcess(
                argv,
                log_path=ctx.job_log(),
                env=child_env(omni.device, entry.env),
                name="omnirt",
                stdout_path=answer,
            )
        except ChildStartError as exc:
            raise AdapterError("model_load_failed", f"OmniRT could not be started: {exc}") from exc
        code = child.wait(check_cancel=ctx.check_cancel)
        stdout = answer.read_text(errors="replace") if answer.exists() else ""
        append_line(ctx.job_log(), f"--- omnirt stdout (exit {code}) ---\n{stdout[-20000:]}")
        tail = tail_text(ctx.job_log())
        if code != 0:
            raise _cli_failure(code, tail)
        for line in reversed(stdout.splitlines()):
            try:
                result = json.loads(line)
            except ValueError:
                continue
            if isinstance(result, dict) and "outputs" in result:
                return result
        raise AdapterError(
            "model_error", f"omnirt exited 0 but printed no --json result; last lines: {last_lines(tail)}"
        )

    # --- server ----------------------------------------------------------------------------
    def _run_server(
        self, omni: OmniRTHandle, inputs: JobInputs, ctx: RunContext, config: dict[str, Any]
    ) -> dict[str, Any]:
        entry, params = omni.entry, inputs.params
        assert entry.endpoint is not None
        base = entry.endpoint.rstrip("/")
        shared = _shared_folder(entry, inputs)
        request_inputs: dict[str, Any] = {}
        for name, path in inputs.files.items():
            local = shared / path.name
            if local != path:
                shutil.copyfile(path, local)
            request_inputs[name] = _to_server(local, entry)
        for key in ("prompt", "negative_prompt"):
            if params.get(key):
                request_inputs[key] = params[key]
        request_config = {
            k: params[k]
            for k in FLAGS
            if k not in ("prompt", "negative_prompt") and params.get(k) is not None
        }
        request_config.update(config)
        request_config["output_dir"] = _to_server(shared, entry)
        body = {
            "task": self._task(inputs),
            "model": params["omnirt_model"],
            "backend": entry.omnirt_backend,
            "inputs": request_inputs,
            "config": request_config,
            "async_run": True,
        }
        session = make_session(entry.api_key)
        what = f"omnirt serve at {base}"
        response = call(session, "POST", f"{base}/v1/generate", json=body, timeout=60.0, what=what)
        if response.status_code not in (200, 201, 202):
            raise error_for(response, what=what)
        record = response.json()
        job_url = f"{base}/v1/jobs/{record['id']}"
        append_line(ctx.job_log(), f"omnirt serve job {record['id']} ({record.get('state')})")
        try:
            while record.get("state") not in TERMINAL:
                ctx.check_cancel()
                time.sleep(0.5)
                poll = call(session, "GET", job_url, timeout=30.0, what=what)
                if poll.status_code != 200:
                    raise error_for(poll, what=what)
                record = poll.json()
        except BaseException:
            # OmniRT cancels only queued jobs; a running one finishes on its own.
            try:
                call(session, "DELETE", job_url, timeout=10.0, what=what)
            except AdapterError:
                pass
            raise
        if record["state"] != "succeeded":
            message = str(record.get("error") or record["state"])
            code = "out_of_memory" if is_out_of_memory(message) else "model_error"
            raise AdapterError(code, f"OmniRT job {record['id']} {record['state']}: {message}")
        result: dict[str, Any] = dict(record.get("result") or {})
        for artifact in result.get("outputs", []):
            if artifact.get("path"):
                artifact["path"] = str(_from_server(artifact["path"], entry))
        return result

    # --- results ---------------------------------------------------------------------------
    @staticmethod
    def _task(inputs: JobInputs) -> str:
        return "audio2video" if "audio" in inputs.files else "text2video"

    @staticmethod
    def _fold_report(metadata: dict[str, Any], ctx: RunContext) -> None:
        ctx.add_extra("omnirt_report", metadata)
        for key, value in (metadata.get("timings") or {}).items():
            if isinstance(value, int | float) and str(key).endswith("_ms"):
                ctx.add_timing(f"omnirt_{key}", float(value))
        for key, value in (metadata.get("memory") or {}).items():
            if isinstance(value, int | float):
                ctx.add_memory(f"omnirt_{key}", float(value))

    @staticmethod
    def _artifact(result: dict[str, Any], folder: Path, entry: OmniRTEntry) -> dict[str, Any]:
        videos = [a for a in result.get("outputs", []) if a.get("kind") == "video"]
        if not videos:
            raise AdapterError(
                "output_missing", f"OmniRT returned no video (outputs: {result.get('outputs')})."
            )
        video = dict(videos[0])
        if video.get("transport") == "inline_bytes" and video.get("data_b64"):
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / "inline-output.mp4"
            path.write_bytes(base64.b64decode(video["data_b64"]))
            video["path"] = str(path)
        path = Path(str(video.get("path") or ""))
        if not video.get("path") or not path.exists():
            raise AdapterError("output_missing", f"OmniRT reported {path} but there is no such file here.")
        if path.stat().st_size == 0:
            raise AdapterError("output_empty", f"OmniRT wrote an empty {path.name}.")
        return video

    @staticmethod
    def _output(video: dict[str, Any], inputs: JobInputs, entry: OmniRTEntry) -> RunOutput:
        """The file and what the gate expects of it, each figure from the first source that has it:
        the request, then the deployment (fps) or OmniRT's artifact, then the speech's length
        (frames), and only then the file itself (which the gate then cannot contradict)."""
        path, params = Path(video["path"]), inputs.params
        audio = inputs.files.get("audio")
        duration = input_audio_duration(inputs) if audio is not None else None
        sources: dict[str, str] = {}
        fps = _first(
            sources, "fps", request=params.get("fps"), deployment=entry.fps.get(params["omnirt_model"])
        )
        width = _first(sources, "width", request=params.get("width"), omnirt_artifact=video.get("width"))
        height = _first(sources, "height", request=params.get("height"), omnirt_artifact=video.get("height"))
        frames = _first(
            sources,
            "num_frames",
            request=params.get("num_frames"),
            omnirt_artifact=video.get("num_frames"),
            audio_duration=round(duration * fps) if duration and fps else None,
        )
        if not (fps and width and height and frames):
            stream = _probe(path).video
            if stream is None:
                raise AdapterError("output_invalid", f"OmniRT's output {path.name} has no video stream.")
            fps = fps or _first(sources, "fps", file=stream.fps)
            width = width or _first(sources, "width", file=stream.width)
            height = height or _first(sources, "height", file=stream.height)
            frames = frames or _first(sources, "num_frames", file=stream.nb_frames)
        if not (fps and width and height and frames):
            raise AdapterError("output_invalid", f"OmniRT's output {path.name} has no readable video stream.")
        return RunOutput(
            frames_generated=int(frames),
            media_duration_s=duration if duration is not None else frames / fps,
            video_path=path,
            expected=VideoFormat(
                width=int(width), height=int(height), fps=float(fps), num_frames=int(frames), audio_path=audio
            ),
            extra={
                "expected_from": sources,
                "omnirt_artifact": {k: v for k, v in video.items() if k != "data_b64"},
            },
        )


def request_config(entry: OmniRTEntry, requested: dict[str, Any]) -> dict[str, Any]:
    """The config sent to OmniRT: the request's keys, with the deployment's winning every key it sets.

    The API refuses path, launch and placement keys when a job is submitted; a job queued before
    that rule (or written to the queue by other means) is refused here too.
    """
    refused = omnirt_deployment_keys(requested)
    if refused:
        raise AdapterError(
            "invalid_parameters",
            f"config key(s) {', '.join(refused)} may only be set in the deployment file.",
        )
    return {**requested, **entry.config}


def _first(sources: dict[str, str], name: str, **candidates: Any) -> Any:
    """The first truthy candidate (in keyword order), noting in ``sources`` where it came from."""
    for source, value in candidates.items():
        if value:
            sources[name] = source.replace("_", " ")
            return value
    return None


def _cli_failure(code: int, tail: str) -> AdapterError:
    lines = last_lines(tail)
    if code == 2:
        if "InsufficientMemory" in tail or "insufficient memory" in tail.lower():
            return AdapterError(
                "insufficient_device_memory", f"OmniRT's memory budget check refused the run: {lines}"
            )
        return AdapterError("request_rejected", f"OmniRT refused the request (exit 2): {lines}")
    if is_out_of_memory(tail):
        return AdapterError("out_of_memory", f"OmniRT ran out of device memory: {lines}")
    return AdapterError("model_crashed", f"omnirt exited with status {code}: {lines}")


def _shared_folder(entry: OmniRTEntry, inputs: JobInputs) -> Path:
    folder = (entry.scratch_dir / inputs.job_id) if entry.scratch_dir else inputs.scratch / "omnirt"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _to_server(path: Path, entry: OmniRTEntry) -> str:
    text = str(path.resolve())
    for local, remote in entry.path_map.items():
        if text.startswith(local.rstrip("/") + "/"):
            return remote.rstrip("/") + text[len(local.rstrip("/")) :]
    return text


def _from_server(text: str, entry: OmniRTEntry) -> Path:
    for local, remote in entry.path_map.items():
        if text.startswith(remote.rstrip("/") + "/"):
            return Path(local.rstrip("/") + text[len(remote.rstrip("/")) :])
    return Path(text)


def _probe(path: Path) -> Any:
    try:
        return probe_media(path)
    except ProbeError as exc:
        raise AdapterError(
            "output_invalid", f"OmniRT's output {path.name} is not readable media: {exc}"
        ) from exc
