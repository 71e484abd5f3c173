"""Adapter of the built-in reference talking head (``reference-talking-head``, audio2video).

Animates a portrait from speech: the mouth follows the speech-band loudness envelope, the head
sways and nods, the eyes blink and the chest breathes. Generation runs in chunks of
``chunk_frames`` frames whose first ``motion_frames`` are carried over from the previous chunk
(FlashTalk's scheme), so every chunk emits ``chunk_frames - motion_frames`` new frames and the
motion stays continuous; chunk telemetry records the audio, render and copy time of each.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError

from jobservice.media.probe import ffmpeg_path
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
from workers.adapters.reference.audio_features import SAMPLE_RATE, SpeechEnvelope, decode_audio
from workers.adapters.reference.common import Stopwatch, resolve_device, to_uint8_frames
from workers.adapters.reference.face import FaceBox, FaceDetector, FaceLayout, fallback_box
from workers.adapters.reference.talking_head_motion import (
    MotionPlan,
    MotionState,
    carry,
    continue_motion,
    rest_frames,
)
from workers.adapters.reference.talking_head_render import PortraitRenderer
from workers.video.audio_cap import audio_cap_s

MAX_INPUT_PIXELS = 50_000_000
MIN_SIDE = 32
RENDER_PIXELS = 6_000_000  # pixels rendered at once (about 28 frames of 512 x 416)


@dataclass
class TalkingHeadHandle:
    """What stays resident in a worker: the device, the face detector, the envelope's STFT setup."""

    device: torch.device
    detector: FaceDetector
    envelope: SpeechEnvelope
    ffmpeg: str


def output_size(width: int, height: int, max_size: int) -> tuple[int, int]:
    """The portrait's framing, longest side capped at ``max_size``, both sides multiples of 16."""
    scale = min(1.0, max_size / max(width, height))

    def to16(v: float) -> int:
        return min(max_size, max(MIN_SIDE, int(round(v / 16.0)) * 16))

    return to16(width * scale), to16(height * scale)


def flatten(image: Image.Image) -> Image.Image:
    """RGB of an image; transparent areas become a light studio grey, not black."""
    if image.has_transparency_data:
        backdrop = Image.new("RGBA", image.size, (200, 200, 200, 255))
        return Image.alpha_composite(backdrop, image.convert("RGBA")).convert("RGB")
    return image.convert("RGB")


def load_portrait(path: Any, max_size: int) -> np.ndarray:
    """Decode the portrait, resize it to cover the output size and centre-crop: [H, W, 3] uint8."""
    try:
        with warnings.catch_warnings():
            # A decompression bomb is a bad input, not a warning to log.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path, formats=["PNG", "JPEG", "WEBP"]) as opened:  # as the API checks
                if opened.width * opened.height > MAX_INPUT_PIXELS:
                    raise AdapterError("invalid_image", "The image is too large (over 50 megapixels).")
                image = flatten(ImageOps.exif_transpose(opened))
    except (
        UnidentifiedImageError,
        OSError,
        ValueError,
        Image.DecompressionBombError,
        Image.DecompressionBombWarning,
    ) as exc:
        raise AdapterError(
            "invalid_image", f"The image could not be read as PNG, JPEG or WebP ({exc})."
        ) from exc
    if min(image.size) < 16:
        raise AdapterError("invalid_image", f"The image is too small ({image.width}x{image.height} pixels).")
    width, height = output_size(image.width, image.height, max_size)
    cover = max(width / image.width, height / image.height)
    resized = image.resize(
        (max(width, round(image.width * cover)), max(height, round(image.height * cover))),
        Image.Resampling.LANCZOS,
    )
    left, top = (resized.width - width) // 2, (resized.height - height) // 2
    return np.asarray(resized.crop((left, top, left + width, top + height)), dtype=np.uint8).copy()


def render_frames(
    renderer: PortraitRenderer, states: list[MotionState], clock: Stopwatch
) -> tuple[np.ndarray, float, float]:
    """Render states to host uint8 frames in batches of at most RENDER_PIXELS pixels.

    Returns the frames, the render time and the device->host copy time (ms). Batching bounds
    the memory of large frames and long chunks; the time since ``clock``'s last lap (the
    chunk's motion) counts as render time.
    """
    per_batch = max(1, RENDER_PIXELS // (renderer.width * renderer.height))
    parts, core_ms, copy_ms = [], 0.0, 0.0
    for start in range(0, len(states), per_batch):
        frames = renderer.render(states[start : start + per_batch])
        core_ms += clock.lap()
        parts.append(to_uint8_frames(frames))
        copy_ms += clock.lap()
    return (parts[0] if len(parts) == 1 else np.concatenate(parts)), core_ms, copy_ms


class ReferenceTalkingHeadAdapter(Adapter):
    """Portrait + speech -> talking-head video, deterministic for a seed."""

    model_ids = ("reference-talking-head",)

    def load(self, device: DeviceContext, params: dict[str, Any] | None = None) -> TalkingHeadHandle:
        """Load the Haar cascade and set up the STFT on the device.

        ``params["ffmpeg"]`` may name the ffmpeg binary; by default it is looked up on PATH.
        """
        torch_device = resolve_device(device.torch_device)
        ffmpeg = str((params or {}).get("ffmpeg") or ffmpeg_path("ffmpeg"))
        return TalkingHeadHandle(torch_device, FaceDetector(), SpeechEnvelope(torch_device), ffmpeg)

    def run(self, handle: Any, inputs: JobInputs, ctx: RunContext) -> RunOutput:
        """Render the video chunk by chunk, streaming frames through ``ctx``."""
        h: TalkingHeadHandle = handle
        p = inputs.params
        fps = int(p["fps"])
        chunk_frames, motion_frames = int(p["chunk_frames"]), int(p["motion_frames"])
        clock = Stopwatch(h.device)
        job = _prepare(h, inputs, ctx, clock)
        ctx.check_cancel()
        mouth_values = _render_chunks(h, job, p, ctx, clock)
        return RunOutput(
            frames_generated=job.num_frames,
            media_duration_s=job.num_frames / fps,
            extra={
                "face_detector": job.box.detector,
                "face_box": job.box.as_list(),
                "audio_duration_s": round(job.duration, 4),
                "output_size": [job.portrait.shape[1], job.portrait.shape[0]],
                "chunk_frames": chunk_frames,
                "motion_frames": motion_frames,
                "new_frames_per_chunk": chunk_frames - motion_frames,
                "mouth_open_mean": round(float(np.mean(mouth_values)), 4),
                "speaking_fraction": round(float(np.mean(np.asarray(mouth_values) > 0.1)), 4),
                "device": str(h.device),
            },
        )


@dataclass
class _Prepared:
    """A job's decoded speech, portrait and face, and its frame count."""

    samples: np.ndarray
    duration: float
    num_frames: int
    portrait: np.ndarray
    box: FaceBox


def _prepare(h: TalkingHeadHandle, inputs: JobInputs, ctx: RunContext, clock: Stopwatch) -> _Prepared:
    """Decode the speech, load the portrait, find the face, and open the video."""
    p = inputs.params
    fps = int(p["fps"])
    samples = decode_audio(inputs.files["audio"], h.ffmpeg, max_seconds=audio_cap_s(inputs.meta))
    duration = samples.size / SAMPLE_RATE
    num_frames = round(duration * fps)
    if num_frames < 1:
        raise AdapterError("invalid_audio", f"The audio lasts {duration:.3f} s, shorter than one frame.")
    ctx.add_timing("audio_decode_ms", clock.lap())

    portrait = load_portrait(inputs.files["image"], int(p["max_size"]))
    height, width = portrait.shape[:2]
    ctx.add_timing("image_load_ms", clock.lap())
    box = h.detector.detect(portrait) or fallback_box(width, height)
    ctx.add_timing("face_detect_ms", clock.lap())
    ctx.start_video(
        VideoFormat(
            width=width,
            height=height,
            fps=float(fps),
            num_frames=num_frames,
            audio_path=inputs.files["audio"],
        )
    )
    return _Prepared(samples, duration, num_frames, portrait, box)


def _render_chunks(
    h: TalkingHeadHandle, job: _Prepared, p: dict[str, Any], ctx: RunContext, clock: Stopwatch
) -> list[float]:
    """Generate chunk after chunk, carrying motion frames as FlashTalk does; the mouth openness per frame."""
    fps, seed = int(p["fps"]), int(p["seed"])
    chunk_frames, motion_frames = int(p["chunk_frames"]), int(p["motion_frames"])
    stride, num_frames = chunk_frames - motion_frames, job.num_frames
    mouth_values: list[float] = []
    with torch.inference_mode():
        audio = torch.from_numpy(job.samples).to(h.device)
        image = torch.from_numpy(job.portrait).to(h.device).permute(2, 0, 1).float() / 255.0
        layout = FaceLayout.from_box(job.box, job.portrait)
        renderer = PortraitRenderer(image, layout, float(p["mouth_scale"]), float(p["motion_scale"]))
        plan = MotionPlan(seed, job.duration, float(p["motion_scale"]))
        carried: list[MotionState] = rest_frames(motion_frames)
        ctx.add_timing("prepare_ms", clock.lap())

        for index, first in enumerate(range(0, num_frames, stride)):
            started = time.perf_counter()
            clock.restart()  # the previous chunk's hand-off to the encoder is not this chunk's audio
            new = min(stride, num_frames - first)
            raw = h.envelope.openness(audio, first, new, fps).tolist()
            audio_ms = clock.lap()
            window = carried + continue_motion(plan, carried, raw, first, fps)
            host, core_ms, copy_ms = render_frames(renderer, window[len(carried) :], clock)
            ctx.emit_frames(host)
            carried = carry(window, motion_frames)
            mouth_values.extend(s.mouth for s in window[-new:])
            total_ms = (time.perf_counter() - started) * 1000.0
            ctx.record_chunk(
                ChunkTelemetry(
                    index=index,
                    frames=new,
                    audio_embedding_ms=audio_ms,
                    core_ms=core_ms,
                    copy_ms=copy_ms,
                    total_ms=total_ms,
                )
            )
            ctx.progress((first + new) / num_frames, "render")
            ctx.check_cancel()
    return mouth_values
