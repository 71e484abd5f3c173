"""SoulX-FlashHead-1.3B: the checkout's ``generate_video.py`` run once per job.

The contract (reference/seed-systems.md 2.1, 1.7; seeds/000): ``generate_video.py --ckpt_dir
--wav2vec_dir --model_type --cond_image --audio_path --audio_encode_mode --save_file --base_seed``,
started with ``python`` or ``torchrun --nproc-per-node N`` over the worker's cards, after
sourcing the Ascend environment script when one is configured. The NPU adaptation reads
``FLASHHEAD_SAMPLE_STEPS``, ``FLASHHEAD_VAE_2D_SPLIT``, ``FLASHHEAD_LATENT_CARRY`` and
``FLASHHEAD_NPU_FUSION_ATTENTION`` (upstream ignores them). Output: 512x512, 25 fps, the audio's
duration (the last slice is padded), muxed by the script with ``ffmpeg -shortest`` and no
``check=True``, so a failed mux shows only as a missing file.

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

from jobservice.deployment_schema import FlashHeadEntry
from workers.adapters.base import (
    Adapter,
    AdapterError,
    DeviceContext,
    JobInputs,
    RunContext,
    RunOutput,
    VideoFormat,
)
from workers.adapters.child import ChildProcess, ChildStartError, last_lines, tail_text, with_env_script
from workers.adapters.entries import deployment_entry
from workers.adapters.memory import MemoryReader, check_budget, read_free_memory
from workers.adapters.soulx_common import (
    Launch,
    child_env,
    child_failure,
    input_audio_duration,
    resolve_launch,
)

SIZE, FPS = 512, 25.0
NEW_FRAMES_PER_CHUNK = {"pro": 28, "lite": 24}  # 33-frame chunks minus the carried motion frames
_CHUNK_LINE = re.compile(r"chunk[-_ ]?(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class FlashHeadHandle:
    """A configured checkout on a card group (nothing is loaded in this process)."""

    entry: FlashHeadEntry
    device: DeviceContext


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
        log_tail = tail_text(ctx.job_log())
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
        frames = round(duration * FPS)
        ctx.progress(1.0)
        return RunOutput(
            frames_generated=frames,
            media_duration_s=frames / FPS,
            video_path=save,
            expected=VideoFormat(
                width=SIZE, height=SIZE, fps=FPS, num_frames=frames, audio_path=inputs.files["audio"]
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
