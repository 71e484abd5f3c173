"""SoulX-FlashTalk-14B: a resident worker per card group keeps the model loaded between jobs.

The resident (workers/adapters/soulx/flashtalk_resident.py; tests run it against a fake upstream
``flash_talk`` package, and a stand-in of it for the failure paths) is started with ``python`` or
``torchrun --nproc-per-node N`` over the worker's cards, with the job's settings (size, frames per
chunk, motion frames, steps, colour correction) as the FLASHTALK_* variables of OmniRT's patch
(reference/seed-systems.md 2.2). Only a patched or NPU-adapted checkout applies them; plain
upstream runs with its ``infer_params.yaml``. So the settings IN FORCE are the ones the resident
reports (workers/adapters/soulx/flashtalk_checkout.py): the encoder and the gate use those, the
RunReport records both sides, and a job whose preset was not honoured gets a warning in its
view. Those settings force a reload when they change, so residents are kept in an LRU of
``pipeline_cache_size`` keyed by them (a setting the checkout was seen to fix whatever is asked
no longer tells residents apart); the oldest is shut down BEFORE a new one starts (two 14B
models rarely fit on one group). Each job is fed chunk by chunk: cancel and timeout act at chunk
boundaries, frames stream into the pipeline's encoder and gate, and each chunk's telemetry
becomes the seed benchmark's figures (``steady`` excludes chunk 0).

A job that ends early (cancel, timeout, lost lease, an error) must leave its resident in step
for the next job: the answer of a request still in flight is collected and the job dropped
(``end``) within ``cancel_grace``; a resident that does not manage is shut down, never reused.
Each resident logs to its own file in the state folder; only the last few are kept.

Each chunk brings ``frame_num - motion_frames_num`` new frames; the resident keeps them by the
count ``run_pipeline`` really returned (upstream returns only the new frames, OmniRT's patched
checkout all of them) and this adapter checks the count and records the case. The resident pads
the last audio slice with silence and this adapter keeps exactly the audio's duration of frames,
so the output matches the speech (upstream's script truncates instead).
"""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobservice.families.flashtalk import FLASHTALK_RELOAD_KEYS, FlashTalkEntry
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
from workers.adapters.processes.child import ChildStartError, append_line, with_env_script
from workers.adapters.processes.memory import MemoryReader, check_budget, read_free_memory
from workers.adapters.processes.resident_client import ResidentGone, ResidentWorker
from workers.adapters.soulx.common import child_env, input_audio_duration, resolve_launch
from workers.adapters.soulx.flashtalk_checkout import (
    effective_key,
    not_honoured,
    requested,
    warning,
)
from workers.adapters.soulx.flashtalk_chunks import stream_chunks

log = logging.getLogger(__name__)
DEFAULT_RESIDENT = Path(__file__).with_name("flashtalk_resident.py")
FPS = 25.0
RESIDENT_LOGS_KEPT = 5  # per card group, in the state folder


@dataclass
class FlashTalkHandle:
    """The deployment entry, the card group and the resident pipelines (LRU, newest last)."""

    entry: FlashTalkEntry
    device: DeviceContext
    state_dir: Path
    residents: OrderedDict[tuple[Any, ...], ResidentWorker] = field(default_factory=OrderedDict)
    # Settings this checkout was seen to run with whatever was asked (its YAML's, say).
    fixed: dict[str, Any] = field(default_factory=dict)


def resident_env(params: dict[str, Any], launch_nproc: int) -> dict[str, str]:
    """The FLASHTALK_* variables (OmniRT's patch) asking for a job's settings; plain upstream
    ignores them, so what is in force is what the resident reports."""
    return {
        "FLASHTALK_HEIGHT": str(params["height"]),
        "FLASHTALK_WIDTH": str(params["width"]),
        "FLASHTALK_FRAME_NUM": str(params["frame_num"]),
        "FLASHTALK_MOTION_FRAMES_NUM": str(params["motion_frames_num"]),
        "FLASHTALK_SAMPLE_STEPS": str(params["sample_steps"]),
        "FLASHTALK_COLOR_CORRECTION_STRENGTH": str(params["color_correction_strength"]),
        "FLASHTALK_TGT_FPS": str(int(FPS)),
        "GPU_NUM": str(launch_nproc),
    }


class FlashTalkAdapter(Adapter):
    """Drives resident FlashTalk pipelines chunk by chunk."""

    model_ids = ("soulx-flashtalk-14b",)
    execution_mode = "persistent_worker"
    loads_in_run = True  # load() reads the entry; a resident starts on the first job that needs it

    def __init__(
        self, *, memory_reader: MemoryReader | None = None, resident_logs_kept: int = RESIDENT_LOGS_KEPT
    ) -> None:
        self._memory_reader = memory_reader or (lambda device: read_free_memory(device, in_process=False))
        self._logs_kept = max(1, resident_logs_kept)

    def load(self, device: DeviceContext, params: dict[str, Any] | None = None) -> FlashTalkHandle:
        """Read the deployment entry; residents start on the first job that needs their settings."""
        entry, runtime = deployment_entry("soulx-flashtalk-14b", params, FlashTalkEntry)
        state_dir = Path(runtime.get("state_dir") or "var/workers") / "flashtalk"
        state_dir.mkdir(parents=True, exist_ok=True)
        return FlashTalkHandle(entry=entry, device=device, state_dir=state_dir)

    def unload(self, handle: Any) -> None:
        """Shut every resident down."""
        ft: FlashTalkHandle = handle
        while ft.residents:
            _, resident = ft.residents.popitem(last=False)
            resident.shutdown()

    # --- residents -------------------------------------------------------------------------
    def _resident(
        self, ft: FlashTalkHandle, key: tuple[Any, ...], inputs: JobInputs, ctx: RunContext
    ) -> tuple[ResidentWorker, bool]:
        resident = ft.residents.get(key)
        if resident is not None and resident.alive():
            ft.residents.move_to_end(key)
            return resident, True
        if resident is not None:  # died between jobs
            ft.residents.pop(key).shutdown()
        while len(ft.residents) >= ft.entry.pipeline_cache_size:
            old_key, old = ft.residents.popitem(last=False)
            settings = dict(zip(FLASHTALK_RELOAD_KEYS, old_key, strict=True))
            append_line(ctx.job_log(), f"resident: evicting pipeline {settings}")
            old.shutdown()
        budget = check_budget(
            model_id=inputs.model,
            need_gb=ft.entry.min_memory_gb,
            scope=ft.entry.memory_scope,
            device=ft.device,
            reader=self._memory_reader,
        )
        ctx.add_extra("memory_budget", budget)
        with ctx.loading():  # the model's cold load: the fleet's ledger and its load time see it
            resident = self._start(ft, key, inputs.params, ctx)
        ft.residents[key] = resident
        return resident, False

    def _start(
        self, ft: FlashTalkHandle, key: tuple[Any, ...], params: dict[str, Any], ctx: RunContext
    ) -> ResidentWorker:
        entry, device = ft.entry, ft.device
        launch = resolve_launch(entry, device)
        script = str(entry.resident_script or DEFAULT_RESIDENT)
        model_env = resident_env(params, launch.nproc)

        def argv_for(socket_path: str) -> list[str]:
            args = [script, "--connect", socket_path, "--repo", str(entry.repo)]
            args += ["--ckpt_dir", str(entry.ckpt_dir), "--wav2vec_dir", str(entry.wav2vec_dir)]
            if entry.cpu_offload:
                args.append("--cpu_offload")
            return with_env_script([*launch.prefix, *args], entry.ascend_env_script)

        log_path = self._new_log(ft)
        note = f"resident: starting ({launch.launcher} x{launch.nproc}) with {model_env}; log {log_path}"
        append_line(ctx.job_log(), note)
        log.info(note)
        started = time.perf_counter()
        try:
            resident = ResidentWorker(
                argv_for,
                env=child_env(device, model_env, entry.env),
                cwd=entry.repo,
                log_path=log_path,
                name="FlashTalk resident worker",
            )
        except ChildStartError as exc:
            raise AdapterError(
                "model_load_failed", f"The FlashTalk resident worker could not be started: {exc}"
            ) from exc
        try:
            ready = resident.wait_ready(timeout=entry.startup_timeout, check_cancel=ctx.check_cancel)
        except BaseException:
            _copy_log(ctx, log_path, 0)
            resident.shutdown(grace=0)
            raise
        load_ms = (time.perf_counter() - started) * 1000
        ctx.add_timing("resident_start_ms", load_ms)
        ctx.add_extra(
            "resident_started",
            {
                "launcher": launch.launcher,
                "nproc_per_node": launch.nproc,
                "argv": resident.child.argv,
                "env": model_env,
                "ready": ready,
            },
        )
        return resident

    def _new_log(self, ft: FlashTalkHandle) -> Path:
        """A log file for a resident about to start, after deleting this card group's oldest ones
        (never a running resident's: the state folder is shared by the host's workers)."""
        group = re.sub(r"[^0-9A-Za-z]+", "_", ft.device.label)
        in_use = {resident.log_path for resident in ft.residents.values()}
        old = [p for p in sorted(ft.state_dir.glob(f"resident-{group}-*.log")) if p not in in_use]
        for stale in old[: max(0, len(old) + len(in_use) + 1 - self._logs_kept)]:
            stale.unlink(missing_ok=True)
        return ft.state_dir / f"resident-{group}-{int(time.time() * 1000)}.log"

    # --- a job -------------------------------------------------------------------------------
    def run(self, handle: Any, inputs: JobInputs, ctx: RunContext) -> RunOutput:
        """Start or reuse a resident, feed it the job chunk by chunk, stream its frames."""
        ft: FlashTalkHandle = handle
        params = inputs.params
        key = effective_key(params, ft.fixed)
        duration = input_audio_duration(inputs)
        resident, reused = self._resident(ft, key, inputs, ctx)
        ctx.set_cold_start(not reused)
        ctx.add_extra("pipeline_reused", reused)
        ctx.add_extra("pipeline_key", dict(zip(FLASHTALK_RELOAD_KEYS, key, strict=True)))
        ctx.add_extra("resident", {"pid": resident.child.pid, "jobs_served_before": resident.jobs_served})
        log_offset = _size(resident.log_path)
        try:
            output = self._generate(ft, resident, inputs, ctx, duration)
            resident.jobs_served += 1
            return output
        except BaseException as exc:
            if isinstance(exc, ResidentGone) or not self._settle(resident, ft.entry, ctx):
                _forget(ft, resident)
                resident.shutdown(grace=2)
            raise
        finally:
            _copy_log(ctx, resident.log_path, log_offset)

    @staticmethod
    def _settle(resident: ResidentWorker, entry: FlashTalkEntry, ctx: RunContext) -> bool:
        """Bring a resident whose job ended early back in step: collect the answer of a request in
        flight (a chunk cannot be interrupted) and drop the job. False if it does not manage
        within ``cancel_grace``: its next answer could be taken for another job's, so it must go."""
        try:
            resident.drain(timeout=entry.cancel_grace)
            resident.request({"op": "end"}, timeout=entry.cancel_grace or 1.0, check_cancel=lambda: None)
        except AdapterError as exc:
            append_line(ctx.job_log(), f"resident: not back in step ({exc.message}); shutting it down")
            return False
        return True

    def _generate(
        self,
        ft: FlashTalkHandle,
        resident: ResidentWorker,
        inputs: JobInputs,
        ctx: RunContext,
        duration: float,
    ) -> RunOutput:
        entry, params = ft.entry, inputs.params
        out_dir = inputs.scratch / "flashtalk"
        out_dir.mkdir(parents=True, exist_ok=True)
        started = resident.request(
            {
                "op": "start",
                "job_id": inputs.job_id,
                "image": str(inputs.files["image"].resolve()),
                "audio": str(inputs.files["audio"].resolve()),
                "prompt": params["prompt"],
                "seed": int(params["seed"]),
                "out_dir": str(out_dir.resolve()),
            },
            timeout=entry.chunk_timeout,
            check_cancel=ctx.check_cancel,
        )
        if started.get("event") != "started":
            raise ResidentGone("model_crashed", f"the resident answered {started!r:.200} to start")
        width, height, per_chunk = (
            int(started["width"]),
            int(started["height"]),
            int(started["frames_per_chunk"]),
        )
        fps = float(started.get("fps") or FPS)
        self._settings_in_force(ft, resident, params, dict(started.get("settings") or {}), ctx)
        chunks = int(started["chunks"])
        keep = round(duration * fps)  # frames covering exactly the audio
        capped = params.get("max_chunks") is not None and params["max_chunks"] < chunks
        if capped:
            chunks = int(params["max_chunks"])
            keep = min(keep, chunks * per_chunk)
        ctx.start_video(
            VideoFormat(
                width=width,
                height=height,
                fps=fps,
                num_frames=keep,
                audio_path=inputs.files["audio"],
                expected_duration_s=keep / fps if capped else None,
            )
        )
        emitted = stream_chunks(
            resident,
            ctx=ctx,
            chunks=chunks,
            per_chunk=per_chunk,
            keep=keep,
            size=(height, width),
            chunk_timeout=entry.chunk_timeout,
        )
        resident.request({"op": "end"}, timeout=60.0, check_cancel=lambda: None)
        return RunOutput(frames_generated=emitted, media_duration_s=emitted / fps)

    @staticmethod
    def _settings_in_force(
        ft: FlashTalkHandle,
        resident: ResidentWorker,
        params: dict[str, Any],
        in_force: dict[str, Any],
        ctx: RunContext,
    ) -> None:
        """Record what the job asked for and what the resident runs with; learn the settings this
        checkout fixes, re-keying the resident so the next job asking the same shares it."""
        wanted = requested(params)
        differences = not_honoured(wanted, in_force)
        ctx.add_extra("settings_requested", {"preset": params.get("preset"), **wanted})
        ctx.add_extra("settings_in_force", in_force)
        ctx.add_extra("settings_not_honoured", differences)
        if not differences:
            return
        ctx.add_extra("warnings", [warning(str(params.get("preset")), differences)])
        append_line(ctx.job_log(), f"resident: settings not honoured by the checkout: {differences}")
        ft.fixed.update({key: diff["in_force"] for key, diff in differences.items()})
        _forget(ft, resident)
        stale = ft.residents.pop(effective_key(params, ft.fixed), None)
        if stale is not None and stale is not resident:
            stale.shutdown()  # an older resident of the same settings in force
        ft.residents[effective_key(params, ft.fixed)] = resident


def _forget(ft: FlashTalkHandle, resident: ResidentWorker) -> None:
    """Drop ``resident`` from the LRU, whatever key it is filed under."""
    for key in [k for k, r in ft.residents.items() if r is resident]:
        del ft.residents[key]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _copy_log(ctx: RunContext, resident_log: Path, offset: int) -> None:
    """Append what the resident logged during this job to the job's log."""
    try:
        with resident_log.open("rb") as source:
            source.seek(offset)
            data = source.read()
        with ctx.job_log().open("ab") as out:
            out.write(b"--- resident worker log ---\n" + data)
    except OSError:
        log.warning("could not copy the resident log %s", resident_log, exc_info=True)


__all__ = ["FlashTalkAdapter", "resident_env"]
