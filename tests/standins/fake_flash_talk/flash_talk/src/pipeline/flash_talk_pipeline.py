"""Fake of SoulX-FlashTalk's ``FlashTalkPipeline`` (flash_talk/src/pipeline/flash_talk_pipeline.py):
the same constructor and method signatures and return shapes, no model.

What upstream's code fixes and this mirrors:

* ``preprocess_audio(speech_array, sr, fps)`` -> float32 ``[frames, layers, dim]``, ``frames`` being
  ``int(len(speech) / sr * fps)`` (wav2vec2 hidden states after the first, one row per frame).
* ``generate(audio_embedding)`` -> float32 ``[3, T, H, W]`` in -1..1. Upstream returns
  ``videos[:, :, motion_frames_num:]`` (T = frame_num - motion_frames_num); the ``all_frames``
  variant returns all ``frame_num`` frames, as OmniRT's patched checkout does, the first
  ``motion_frames_num`` repeating the previous chunk's last frames (the first chunk's: the portrait).
"""

import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from tests.standins.common import record

_VARIANT_FILE = Path(__file__).resolve().parents[2] / "configs" / "standin_variant.json"
LAYERS, DIM = 12, 768  # chinese-wav2vec2-base: 12 hidden layers of 768


class FlashTalkPipeline:
    """The conditioning of one job and a frame counter, instead of T5, CLIP, the VAE and the DiT."""

    def __init__(
        self,
        config: object,
        checkpoint_dir: str,
        wav2vec_dir: str,
        device: str = "cuda",
        use_usp: bool = False,
        cpu_offload: bool = False,
        num_timesteps: int = 1000,
        use_timestep_transform: bool = True,
    ) -> None:
        for folder in (checkpoint_dir, wav2vec_dir):
            if not Path(folder).is_dir():
                raise FileNotFoundError(folder)
        self.device = device
        self.frames_returned = json.loads(_VARIANT_FILE.read_text()).get("frames", "new_frames_only")
        self.prepared = False

    @torch.no_grad()
    def prepare_params(
        self,
        input_prompt: str,
        cond_image: str,
        target_size: tuple[int, int],
        frame_num: int,
        motion_frames_num: int,
        sampling_steps: int,
        seed: int | None = None,
        shift: float = 5.0,
        color_correction_strength: float = 0.0,
    ) -> None:
        """Keeps the portrait at ``target_size`` (height, width) and restarts the motion."""
        self.frame_num, self.motion_frames_num = frame_num, motion_frames_num
        height, width = target_size
        image = Image.open(cond_image).convert("RGB").resize((width, height))
        pixels = torch.from_numpy(np.asarray(image, dtype=np.float32).copy())  # [H, W, 3] 0..255
        self.portrait = pixels.permute(2, 0, 1) / 127.5 - 1.0  # [3, H, W] in -1..1
        if seed is None:  # upstream hands None to manual_seed, which raises this
            raise TypeError("manual_seed expected a seed, got None")
        self.generator = torch.Generator(device="cpu").manual_seed(int(seed))
        self.next_frame = 0  # absolute index of the next new frame of this job
        self.prepared = True

    @torch.no_grad()
    def preprocess_audio(self, speech_array: np.ndarray, sr: int = 16000, fps: int = 25) -> torch.Tensor:
        """One row per video frame: the frame's speech energy spread over layers x dim."""
        frames = int(len(speech_array) / sr * fps)
        speech = torch.as_tensor(np.asarray(speech_array, dtype=np.float32))
        per_frame = speech[: frames * (len(speech) // max(frames, 1))].reshape(frames, -1)
        energy = per_frame.abs().mean(dim=1)  # [frames]
        return energy[:, None, None].expand(frames, LAYERS, DIM).contiguous()

    @torch.no_grad()
    def generate(self, audio_embedding: torch.Tensor) -> torch.Tensor:
        """[3, T, H, W] float32 in -1..1 for the next chunk (see the module docstring for T)."""
        if not self.prepared:
            raise AttributeError("'FlashTalkPipeline' object has no attribute 'arg_c'")
        if audio_embedding.shape[1] != self.frame_num:
            raise RuntimeError(
                f"audio embedding covers {audio_embedding.shape[1]} frames, the chunk {self.frame_num}"
            )
        new = self.frame_num - self.motion_frames_num
        first = self.next_frame
        if self.frames_returned == "all_frames":
            first -= self.motion_frames_num
            count = self.frame_num
        elif self.frames_returned == "new_frames_only":
            count = new
        else:
            count = int(self.frames_returned)  # a broken checkout
        loudness = audio_embedding[0, :, 2, 0, 0]  # the centre frame's energy, per frame
        frames = [self._frame(first + i, float(loudness[min(i, len(loudness) - 1)])) for i in range(count)]
        self.next_frame += new
        record("flash_talk.generate", returned=count, first=first)
        return torch.stack(frames, dim=1).to(torch.float32)

    def _frame(self, index: int, loudness: float) -> torch.Tensor:
        """The portrait, with a bar that moves one step per frame (none before the first new frame)."""
        frame = self.portrait.clone()
        if index < 0:
            return frame
        height = frame.shape[1]
        row = (index * 7) % max(height - 8, 1)
        frame[:, row : row + 8, :] = torch.tensor([0.9, -0.6, -0.6])[:, None, None]
        noise = torch.rand(frame.shape[1:], generator=self.generator) * 0.02
        return (frame + noise + min(loudness, 0.2)).clamp(-1.0, 1.0)
