"""Fake of SoulX-FlashTalk's ``flash_talk/inference.py``: upstream's module-level names, signatures,
return shapes and dtypes, with a few CPU tensor operations instead of the 14B model.

Checked against Soul-AILab/SoulX-FlashTalk ``flash_talk/inference.py``: ``infer_params`` is read
at import from ``flash_talk/configs/infer_params.yaml`` relative to the working directory (so
the caller must chdir into the checkout), ``target_size`` is fixed then, and nothing reads the
FLASHTALK_* variables; OmniRT's patch (model_backends/flashtalk/patches/
soulx-flashtalk-ascend-omnirt.patch) adds the overrides, which the ``reads_env`` variant mimics.
"""

import datetime
import json
import os
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import yaml
from flash_talk.src.pipeline.flash_talk_pipeline import FlashTalkPipeline

from tests.standins.common import record

# Relative to the working directory, as upstream opens it.
with open("flash_talk/configs/infer_params.yaml") as f:
    infer_params = yaml.safe_load(f)

VARIANT = json.loads((Path(__file__).parent / "configs" / "standin_variant.json").read_text())

if VARIANT.get("reads_env"):
    _OVERRIDES = {
        "frame_num": ("FLASHTALK_FRAME_NUM", int),
        "motion_frames_num": ("FLASHTALK_MOTION_FRAMES_NUM", int),
        "tgt_fps": ("FLASHTALK_TGT_FPS", int),
        "sample_steps": ("FLASHTALK_SAMPLE_STEPS", int),
        "color_correction_strength": ("FLASHTALK_COLOR_CORRECTION_STRENGTH", float),
        "height": ("FLASHTALK_HEIGHT", int),
        "width": ("FLASHTALK_WIDTH", int),
    }
    for _name, (_variable, _cast) in _OVERRIDES.items():
        if _variable in os.environ:
            infer_params[_name] = _cast(os.environ[_variable])

target_size = (infer_params["height"], infer_params["width"])


def get_pipeline(
    world_size: int, ckpt_dir: str, wav2vec_dir: str, cpu_offload: bool = False
) -> FlashTalkPipeline:
    """Upstream builds FlashTalkPipeline on the device get_device chose, initialising
    torch.distributed (NCCL, through xfuser) when world_size > 1; here gloo on the CPU."""
    if world_size > 1 and not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=5))
    record(
        "flash_talk.get_pipeline",
        world_size=world_size,
        ckpt_dir=ckpt_dir,
        wav2vec_dir=wav2vec_dir,
        cpu_offload=cpu_offload,
        infer_params=infer_params,
    )
    return FlashTalkPipeline(
        config=None,
        checkpoint_dir=ckpt_dir,
        wav2vec_dir=wav2vec_dir,
        device="cpu",
        use_usp=world_size > 1,
        cpu_offload=cpu_offload,
    )


def get_base_data(pipeline: FlashTalkPipeline, input_prompt: str, cond_image: str, base_seed: int) -> None:
    """Returns None; the pipeline keeps the conditioning (upstream: prepare_params)."""
    record("flash_talk.get_base_data", pipeline=id(pipeline), seed=base_seed, pid=os.getpid())
    pipeline.prepare_params(
        input_prompt=input_prompt,
        cond_image=cond_image,
        target_size=target_size,
        frame_num=infer_params["frame_num"],
        motion_frames_num=infer_params["motion_frames_num"],
        sampling_steps=infer_params["sample_steps"],
        seed=base_seed,
        shift=infer_params["sample_shift"],
        color_correction_strength=infer_params["color_correction_strength"],
    )


def get_audio_embedding(
    pipeline: FlashTalkPipeline,
    audio_array: np.ndarray,
    audio_start_idx: int = -1,
    audio_end_idx: int = -1,
) -> torch.Tensor:
    """[1, end - start, 5, layers, dim] float32: each video frame with its two neighbours either
    side (indices clamped to the window), over the whole clip when no range is given."""
    per_frame = pipeline.preprocess_audio(
        audio_array, sr=infer_params["sample_rate"], fps=infer_params["tgt_fps"]
    )
    if audio_start_idx == -1 or audio_end_idx == -1:
        audio_start_idx, audio_end_idx = 0, per_frame.shape[0]
    centres = torch.arange(audio_start_idx, audio_end_idx)
    neighbours = torch.stack([centres + offset for offset in (-2, -1, 0, 1, 2)], dim=1)
    neighbours = neighbours.clamp(0, audio_end_idx - 1)
    return per_frame[neighbours].unsqueeze(0).contiguous()


def run_pipeline(pipeline: FlashTalkPipeline, audio_embedding: torch.Tensor) -> torch.Tensor:
    """Frames [T, H, W, 3], float32 in 0..255 (not rounded), on the pipeline's device."""
    sample = pipeline.generate(audio_embedding.to(pipeline.device))  # [3, T, H, W] in -1..1
    return (sample.permute(1, 2, 3, 0).add(1).mul(127.5).clamp(0, 255)).contiguous()
