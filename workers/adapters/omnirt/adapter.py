"""OmniRT: any OmniRT model through ``python -m omnirt generate --config FILE --json`` or ``omnirt serve``.

Both modes send one whole OmniRT request (``omnirt_request.build_request``; why a file and not
flags is said there). CLI (checked against the omnirt 0.1.0 package): one JSON line on stdout,
``{"outputs": [Artifact...], "metadata": RunReport}``; exit 2 is a refused request (validation, a
missing file, OmniRT's own memory budget), 1 a crash with a traceback. Cancel and timeout stop
the process group, which holds OmniRT's own ``bash -lc ... generate_video.py`` too. Server:
``POST /v1/generate`` with ``async_run: true``, then ``GET /v1/jobs/{id}`` until it ends. On cancel
or timeout the job is DELETEd, which OmniRT honours only while it is queued: a running job goes
on to its end on the server (its engine has no way to stop one), so the adapter waits up to
``cancel_grace`` for it, records ``extra.omnirt_left_running`` if it is still running, and ends
the job anyway. Inputs and outputs are paths the OmniRT process can see: the CLI runs here; a
server on another host needs a shared folder (``scratch_dir``) and ``path_map``.

A request's ``config`` may set only the allow-listed sampling keys (model_params), and the
deployment's ``config`` wins every key it sets; ``output_dir`` is always the job's own folder,
and an artifact OmniRT reports outside it is refused.

OmniRT checks nothing about the video it returns, so the file goes through our gate, which
expects what the job asked for (then what OmniRT says it made; the file itself is read only for
what neither says). Its RunReport is folded into ours (timings as ``omnirt_<stage>_ms``, its
memory, its ``run_id``, the report under ``extra.omnirt_report`` without the deployment's paths).
"""

from __future__ import annotations

import base64
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from jobservice.families.omnirt import OmniRTEntry
from jobservice.media.probe import ProbeError, probe_media
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
from workers.adapters.omnirt.request import (
    build_request,
    cli_failure,
    confined,
    from_server,
    public_report,
    request_config,
    server_failure,
    to_server,
)
from workers.adapters.processes.child import ChildProcess, ChildStartError, append_line, last_lines, tail_text
from workers.adapters.processes.http_client import call, error_for, make_session
from workers.adapters.soulx.common import child_env, input_audio_duration

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
        requested = params.get("config") or {}
        config = request_config(entry, requested, model=params["omnirt_model"])
        ctx.add_extra(
            "omnirt_request", {"model": params["omnirt_model"], "mode": entry.mode, "config": requested}
        )
        ctx.set_cold_start(entry.mode == "cli")  # a CLI run loads the model every time
        shared = entry.scratch_dir / inputs.job_id if entry.mode == "server" and entry.scratch_dir else None
        folder = (shared or inputs.scratch / "omnirt") / "out"  # the only place OmniRT may write to
        folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        try:
            if entry.mode == "cli":
                result = self._run_cli(omni, inputs, ctx, config, folder)
            else:
                result = self._run_server(omni, inputs, ctx, config, folder)
            ctx.add_timing("omnirt_total_ms", (time.perf_counter() - started) * 1000)
            self._fold_report(result.get("metadata") or {}, ctx)
            video = self._artifact(result, folder)
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
        self, omni: OmniRTHandle, inputs: JobInputs, ctx: RunContext, config: dict[str, Any], folder: Path
    ) -> dict[str, Any]:
        entry = omni.entry
        files = {n: str(path.resolve()) for n, path in inputs.files.items() if n in ("image", "audio")}
        body = build_request(entry, inputs, config, files=files, output_dir=str(folder.resolve()))
        request_file = folder.parent / "request.json"
        request_file.write_text(json.dumps(body, indent=2))
        argv = [entry.python, "-m", "omnirt", "generate", "--config", str(request_file), "--json"]
        answer = folder.parent / "stdout.json"
        # OmniRT appends its stage events to $OMNIRT_LOG_PATH, by default ./omnirt.log: keep
        # them with the job (they end up in its log) and run in the job's folder, not ours.
        events = folder.parent / "omnirt-events.log"
        try:
            child = ChildProcess(
                argv,
                log_path=ctx.job_log(),
                env=child_env(omni.device, {"OMNIRT_LOG_PATH": str(events)}, entry.env),
                cwd=folder.parent,
                name="omnirt",
                stdout_path=answer,
            )
        except ChildStartError as exc:
            raise AdapterError("model_load_failed", f"OmniRT could not be started: {exc}") from exc
        code = child.wait(check_cancel=ctx.check_cancel)
        tail = tail_text(ctx.job_log())  # its stderr: what a failure is told apart by
        stdout = answer.read_text(errors="replace") if answer.exists() else ""
        if events.exists():
            append_line(ctx.job_log(), f"--- omnirt events ---\n{events.read_text(errors='replace')[-8000:]}")
        append_line(ctx.job_log(), f"--- omnirt stdout (exit {code}) ---\n{stdout[-20000:]}")
        if code != 0:
            raise cli_failure(code, tail)
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
        self, omni: OmniRTHandle, inputs: JobInputs, ctx: RunContext, config: dict[str, Any], folder: Path
    ) -> dict[str, Any]:
        entry = omni.entry
        assert entry.endpoint is not None
        base = entry.endpoint.rstrip("/")
        files: dict[str, str] = {}
        for name, path in inputs.files.items():
            if name not in ("image", "audio"):
                continue
            local = folder.parent / path.name
            if local != path:
                shutil.copyfile(path, local)
            files[name] = to_server(local, entry)
        body = build_request(entry, inputs, config, files=files, output_dir=to_server(folder, entry))
        session = make_session(entry.api_key)
        what = f"omnirt serve at {base}"
        response = call(
            session, "POST", f"{base}/v1/generate", json={**body, "async_run": True}, timeout=60.0, what=what
        )
        if response.status_code not in (200, 201, 202):
            raise error_for(response, what=what)
        record = response.json()
        job_url = f"{base}/v1/jobs/{record['id']}"
        ctx.add_extra("omnirt_job_id", record["id"])
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
            self._abandon(session, job_url, entry, ctx)
            raise
        if record["state"] != "succeeded":
            raise server_failure(record["id"], record["state"], str(record.get("error") or record["state"]))
        raw = record.get("result")
        result: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
        outputs = result.get("outputs")
        for artifact in outputs if isinstance(outputs, list) else []:
            if isinstance(artifact, dict) and artifact.get("path"):
                artifact["path"] = str(from_server(str(artifact["path"]), entry))
        return result

    @staticmethod
    def _abandon(session: requests.Session, job_url: str, entry: OmniRTEntry, ctx: RunContext) -> None:
        """DELETE the server job; OmniRT cancels it only while queued (``OmniEngine.cancel``
        leaves a running one as it is), so wait up to ``cancel_grace`` for a running one to end
        and say so if it did not: it keeps the server's worker busy until it finishes."""
        state = "unknown"
        deadline = time.monotonic() + entry.cancel_grace
        try:
            answer = call(session, "DELETE", job_url, timeout=10.0, what="omnirt serve")
            state = str(answer.json().get("state")) if answer.status_code == 200 else state
            while state not in TERMINAL and time.monotonic() < deadline:
                time.sleep(0.5)
                poll = call(session, "GET", job_url, timeout=10.0, what="omnirt serve")
                state = str(poll.json().get("state"))
        except (AdapterError, ValueError, AttributeError):
            pass
        if state not in TERMINAL:
            ctx.add_extra("omnirt_left_running", {"job": job_url, "state": state})
            append_line(
                ctx.job_log(),
                f"OmniRT cannot stop a running job: {job_url} was still {state} {entry.cancel_grace:g} s "
                "after DELETE; it runs to its end on the server.",
            )
        else:
            append_line(ctx.job_log(), f"OmniRT job {job_url} ended {state} after DELETE")

    # --- results ---------------------------------------------------------------------------
    @staticmethod
    def _fold_report(metadata: dict[str, Any], ctx: RunContext) -> None:
        ctx.add_extra("omnirt_report", public_report(metadata))
        if metadata.get("run_id"):
            ctx.add_extra("omnirt_run_id", metadata["run_id"])
        for key, value in (metadata.get("timings") or {}).items():
            if isinstance(value, int | float) and str(key).endswith("_ms"):
                ctx.add_timing(f"omnirt_{key}", float(value))
        for key, value in (metadata.get("memory") or {}).items():
            if isinstance(value, int | float):
                ctx.add_memory(f"omnirt_{key}", float(value))

    @staticmethod
    def _artifact(result: dict[str, Any], folder: Path) -> dict[str, Any]:
        outputs = result.get("outputs")
        # Whatever answers at OmniRT's address is not trusted to send the shape it should.
        listed = outputs if isinstance(outputs, list) else []
        videos = [a for a in listed if isinstance(a, dict) and a.get("kind") == "video"]
        if not videos:
            raise AdapterError(
                "output_missing", f"OmniRT returned no video (outputs: {result.get('outputs')})."
            )
        video = dict(videos[0])
        if video.get("transport") == "inline_bytes" and video.get("data_b64"):
            path = folder / "inline-output.mp4"
            path.write_bytes(base64.b64decode(video["data_b64"]))
            video["path"] = str(path)
        if not video.get("path"):
            raise AdapterError("output_missing", "OmniRT reported a video without a path.")
        path = confined(Path(str(video["path"])), folder)
        if not path.exists():
            raise AdapterError("output_missing", f"OmniRT reported {path} but there is no such file here.")
        if path.stat().st_size == 0:
            raise AdapterError("output_empty", f"OmniRT wrote an empty {path.name}.")
        video["path"] = str(path)
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


def _first(sources: dict[str, str], name: str, **candidates: Any) -> Any:
    """The first truthy candidate (in keyword order), noting in ``sources`` where it came from."""
    for source, value in candidates.items():
        if value:
            sources[name] = source.replace("_", " ")
            return value
    return None


def _probe(path: Path) -> Any:
    try:
        return probe_media(path)
    except ProbeError as exc:
        raise AdapterError(
            "output_invalid", f"OmniRT's output {path.name} is not readable media: {exc}"
        ) from exc
