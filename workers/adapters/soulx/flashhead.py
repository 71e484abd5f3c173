"""SoulX-FlashHead-1.3B: the checkout's ``generate_video.py`` run once per job.

The contract (reference/seed-systems.md 2.1, 1.7; seeds/000): ``generate_video.py --ckpt_dir
--wav2vec_dir --model_type --cond_image --audio_path --audio_encode_mode --save_file --base_seed``,
started with ``python`` or ``torchrun --nproc-per-node N`` over the worker's cards, after
sourcing the Ascend environment script when one is configured. The NPU adaptation reads
``FLASHHEAD_SAMPLE_STEPS``, ``FLASHHEAD_VAE_2D_SPLIT``, ``FLASHHEAD_LATENT_CARRY`` and
``FLASHHEAD_NPU_FUSION_ATTENTION`` (upstream ignores them). Output: 512x512, 25 fps, muxed by the
script with ``ffmpeg -shortest`` and no ``check=True``, so a failed mux shows only as a missing
file. Its length, from upstream's ``generate_video.py::generate`` (FlashHead's pipeline returns all
33 frames of a chunk, the script drops the motion frames): ``stream`` pads the last slice, so the
video covers the speech; ``once`` pads the speech to 33 + k slices but generates only k chunks
(33 frames, then one slice each), so the video, and through ``-shortest`` the output, ends up to
one slice before the speech (``once_frames``).

Every job is a cold start of the real model (the script loads it each time), and the report
says so. Stdout and stderr go to the job's log; cancel and timeout stop the whole process group.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobservice.families.flashhead import FlashHeadEntry
from jobservice.reports.run_report import ChunkTelemetry
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
    last_lines,
    tail_text,
    with_env_script,
)
from workers.adapters.processes.memory import MemoryReader, check_budget, read_free_memory
from workers.adapters.soulx.common import (
    Launch,
    child_env,
    child_failure,
    input_audio_duration,
    resolve_launch,
)

SIZE, FPS = 512, 25.0
CHUNK_FRAMES, SAMPLE_RATE = 33, 16000  # upstream's flash_head/configs/infer_params.yaml
NEW_FRAMES_PER_CHUNK = {"pro": 28, "lite": 24}  # 33-frame chunks minus the carried motion frames
_CHUNK_LINE = re.compile(r"chunk[-_ ]?(\d+)", re.IGNORECASE)
# generate_video.py logs "Generate video chunk-3 done, cost time: 0.901s" per chunk (rank 0).
_CHUNK_COST = re.compile(r"Generate video chunk-(\d+) done, cost time: ([0-9.]+)s")


@dataclass(frozen=True)
class FlashHeadHandle:
    """A configured checkout on a card group (nothing is loaded in this process)."""

    entry: FlashHeadEntry
    device: DeviceContext


def once_frames(duration: float, model_type: str) -> int:
    """Frames generate_video.py writes in ``once`` mode for ``duration`` s of speech: it pads the
    speech so that 33 frames plus whole slices cover it, then makes one chunk fewer than that."""
    per_frame = SAMPLE_RATE // int(FPS)
    new = NEW_FRAMES_PER_CHUNK[model_type]
    samples = round(duration * SAMPLE_RATE)
    padded = samples + (-(samples - CHUNK_FRAMES * per_frame)) % (new * per_frame)
    chunks = (padded // per_frame - CHUNK_FRAMES) // new
    return CHUNK_FRAMES + new * (chunks - 1) if chunks > 0 else 0


def flashhead_env(params: dict[str, Any], device: DeviceContext) -> dict[str, str]:
    """The NPU adaptation's variables for one job (the seed document's names and 1/0 values)."""
    return {
        "FLASHHEAD_SAMPLE_STEPS": str(int(params["sample_steps"])),
        "FLASHHEAD_VAE_2D_SPLIT": "1" if params["vae_2d_split"] else "0",
        "FLASHHEAD_LATENT_CARRY": "1" if params["latent_carry"] else "0",
        "FLASHHEAD_NPU_FUSION_ATTENTION": "1" if params["npu_fusion_attention"] else "0",
        "FLASHHEAD_DEVICE": device.kind,
    }


def flashhead_args(
    entry: FlashHeadEntry, params: dict[str, Any], files: dict[str, Path], save: Path
) -> list[str]:
    """``generate_video.py`` and its flags (paths absolute, so the checkout's cwd does not matter)."""
    return [
        entry.script,
        "--ckpt_dir",
        str(entry.ckpt_dir),
        "--wav2vec_dir",
        str(entry.wav2vec_dir),
        "--model_type",
        str(params["model_type"]),
        "--cond_image",
        str(files["image"].resolve()),
        "--audio_path",
        str(files["audio"].resolve()),
        "--audio_encode_mode",
        str(params["audio_encode_mode"]),
        "--save_file",
        str(save),
        "--base_seed",
        str(int(params["seed"])),
    ]


class FlashHeadAdapter(Adapter):
    """Runs ``generate_video.py`` per job and hands the finished MP4 to the file gate."""

    model_ids = ("soulx-flashhead-1.3b",)
    execution_mode = "subprocess"

    def __init__(self, *, memory_reader: MemoryReader | None = None) -> None:
        # Collaborator: tests pass a reader with made-up free memory.
        self._memory_reader = memory_reader or (lambda device: read_free_memory(device, in_process=False))

    def load(self, device: DeviceContext, params: dict[str, Any] | None = None) -> FlashHeadHandle:
        """Read the deployment entry; the model itself is loaded by each job's process."""
        entry, _ = deployment_entry("soulx-flashhead-1.3b", params, FlashHeadEntry)
        return FlashHeadHandle(entry=entry, device=device)

    def run(self, handle: Any, inputs: JobInputs, ctx: RunContext) -> RunOutput:
        """Launch the script, wait (cancel/timeout stop the group), then check what it left behind."""
        fh: FlashHeadHandle = handle
        entry, device, params = fh.entry, fh.device, inputs.params
        budget = check_budget(
            model_id=inputs.model,
            need_gb=entry.min_memory_gb,
            scope=entry.memory_scope,
            device=device,
            reader=self._memory_reader,
        )
        ctx.add_extra("memory_budget", budget)
        duration = input_audio_duration(inputs)
        frames = expected_frames(duration, params)
        out_dir = inputs.scratch / "flashhead"
        out_dir.mkdir(parents=True, exist_ok=True)
        save = out_dir / "res_output.mp4"  # FlashHead writes res_output_tmp.mp4 first, then muxes
        launch = resolve_launch(entry, device)
        argv = [*launch.prefix, *flashhead_args(entry, params, inputs.files, save)]
        model_env = flashhead_env(params, device)
        env = child_env(device, model_env, entry.env)
        ctx.add_extra(
            "launch",
            {"launcher": launch.launcher, "nproc_per_node": launch.nproc, "argv": argv, "env": model_env},
        )
        ctx.set_cold_start(True)  # the script loads the model on every job
        ctx.progress(0.0, "starting")
        started = time.perf_counter()
        code = self._run_child(
            argv, entry=entry, env=env, ctx=ctx, launch=launch, duration=duration, params=params
        )
        ctx.add_timing("process_ms", (time.perf_counter() - started) * 1000)
        check_output(code, save, log_tail=tail_text(ctx.job_log()), entry=entry, device=device)
        record_chunk_costs(ctx, str(params["model_type"]))
        ctx.progress(1.0)
        return RunOutput(
            frames_generated=frames,
            media_duration_s=frames / FPS,
            video_path=save,
            expected=VideoFormat(
                width=SIZE,
                height=SIZE,
                fps=FPS,
                num_frames=frames,
                audio_path=inputs.files["audio"],
                # once: the script's video ends before the speech, and -shortest cuts the speech
                expected_duration_s=frames / FPS if frames < round(duration * FPS) else None,
            ),
            extra={"returncode": code},
        )

    def _run_child(
        self,
        argv: list[str],
        *,
        entry: FlashHeadEntry,
        env: dict[str, str],
        ctx: RunContext,
        launch: Launch,
        duration: float,
        params: dict[str, Any],
    ) -> int:
        try:
            child = ChildProcess(
                with_env_script(argv, entry.ascend_env_script),
                log_path=ctx.job_log(),
                env=env,
                cwd=entry.repo,
                name="generate_video.py",
            )
        except ChildStartError as exc:
            raise AdapterError(
                "model_load_failed", f"FlashHead could not be started ({launch.launcher}): {exc}"
            ) from exc
        chunks = max(1, math.ceil(duration * FPS / NEW_FRAMES_PER_CHUNK[str(params["model_type"])]))
        log_path = ctx.job_log()

        def report_progress() -> None:
            # The script logs its chunks; progress is an estimate from the last chunk number seen.
            found = _CHUNK_LINE.findall(tail_text(log_path, 2000))
            if found:
                ctx.progress(min(0.95, (int(found[-1]) + 1) / chunks))

        return child.wait(check_cancel=ctx.check_cancel, on_poll=report_progress, poll_seconds=0.25)


def record_chunk_costs(ctx: RunContext, model_type: str) -> None:
    """The script's own per-chunk times, as chunk telemetry (the seed documents compare them with
    FlashTalk's ``steady_chunk_core_ms_avg``); nothing when the checkout does not log them."""
    chunks: dict[int, float] = {}
    for index, seconds in _CHUNK_COST.findall(tail_text(ctx.job_log(), 1 << 20)):
        chunks[int(index)] = float(seconds) * 1000  # torchrun's ranks may log the same chunk
    for index in sorted(chunks):
        ms = round(chunks[index], 3)
        frames = NEW_FRAMES_PER_CHUNK.get(model_type, NEW_FRAMES_PER_CHUNK["pro"])
        ctx.record_chunk(ChunkTelemetry(index=index, frames=frames, core_ms=ms, total_ms=ms))


def expected_frames(duration: float, params: dict[str, Any]) -> int:
    """The frames generate_video.py makes for ``duration`` s of speech (once mode makes fewer)."""
    if params["audio_encode_mode"] != "once":
        return round(duration * FPS)
    frames = once_frames(duration, str(params["model_type"]))
    if frames <= 0:
        raise AdapterError(
            "input_too_short",
            f"audio_encode_mode once needs more than {CHUNK_FRAMES / FPS:g} s of speech "
            f"(generate_video.py makes no chunk for {duration:.2f} s); use stream.",
        )
    return frames


def check_output(
    code: int, save: Path, *, log_tail: str, entry: FlashHeadEntry, device: DeviceContext
) -> None:
    """The script's exit status and the file it should have left, as job errors."""
    if code != 0:
        raise child_failure(
            what="FlashHead generate_video.py",
            code=code,
            log_tail=log_tail,
            device=device,
            env_script=entry.ascend_env_script,
        )
    if not save.exists():
        raise AdapterError(
            "output_missing",
            f"generate_video.py exited 0 but wrote no {save.name} (its final ffmpeg mux runs unchecked); "
            f"last lines: {last_lines(log_tail)}",
        )
    if save.stat().st_size == 0:
        raise AdapterError("output_empty", f"generate_video.py wrote an empty {save.name}.")
