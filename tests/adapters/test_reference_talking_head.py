"""The built-in reference talking head: sizing, face finding, lip motion, chunking, gate safety."""

from __future__ import annotations

import math
import shutil
import subprocess
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from jobservice.reports.run_report import summarize_chunks
from tests.adapters.conftest import SAMPLES, write_wav
from tests.fakes.context import RecordingContext
from workers.adapters.base import AdapterError, DeviceContext, JobCanceled, JobInputs
from workers.adapters.reference.talking_head import ReferenceTalkingHeadAdapter, output_size
from workers.adapters.reference.talking_head_motion import MotionPlan, carry, continue_motion, rest_frames

PORTRAIT = SAMPLES / "portrait.png"
PARAMS: dict[str, Any] = {
    "seed": 42,
    "fps": 25,
    "max_size": 256,
    "motion_scale": 1.0,
    "mouth_scale": 1.0,
    "chunk_frames": 33,
    "motion_frames": 5,
}


@pytest.fixture(scope="module")
def model() -> tuple[ReferenceTalkingHeadAdapter, Any]:
    """One resident model for the whole module: runs must be re-entrant across jobs."""
    adapter = ReferenceTalkingHeadAdapter()
    return adapter, adapter.load(DeviceContext(kind="cpu"))


@pytest.fixture
def animate(
    model: tuple[ReferenceTalkingHeadAdapter, Any], make_inputs: Callable[..., JobInputs], tmp_path: Path
) -> Callable[..., tuple[np.ndarray, RecordingContext, Any]]:
    """Animate ``image`` with ``audio`` and PARAMS overridden by keyword arguments."""

    def run(
        audio: Path, image: Path = PORTRAIT, **overrides: Any
    ) -> tuple[np.ndarray, RecordingContext, Any]:
        adapter, handle = model
        ctx = RecordingContext(tmp_path)
        inputs = make_inputs(
            "reference-talking-head", {**PARAMS, **overrides}, {"image": image, "audio": audio}
        )
        out = adapter.run(handle, inputs, ctx)
        return ctx.frames, ctx, out

    return run


def wav_seconds(path: Path) -> float:
    with wave.open(str(path)) as w:
        return w.getnframes() / w.getframerate()


def luma(frames: np.ndarray) -> np.ndarray:
    return frames.astype(np.float32) @ np.array([0.299, 0.587, 0.114], dtype=np.float32)


@pytest.mark.parametrize(
    ("size", "max_size", "expected"),
    [
        ((512, 640), 512, (416, 512)),
        ((1920, 1080), 512, (512, 288)),
        ((300, 300), 512, (304, 304)),
        ((512, 640), 128, (96, 128)),
        ((4000, 100), 256, (256, 32)),
    ],
)
def test_output_size_caps_the_long_side_and_rounds_to_16(
    size: tuple[int, int], max_size: int, expected: tuple[int, int]
) -> None:
    width, height = output_size(*size, max_size)
    assert (width, height) == expected
    assert width % 16 == 0 and height % 16 == 0 and max(width, height) <= max_size


def test_frames_chunks_and_format_follow_the_audio(animate: Callable[..., Any], speech_clip: Path) -> None:
    frames, ctx, out = animate(speech_clip)
    expected = round(wav_seconds(speech_clip) * PARAMS["fps"])
    assert ctx.format is not None
    fmt = ctx.format
    assert frames.shape == (expected, fmt.height, fmt.width, 3) == (expected, 256, 208, 3)
    assert (fmt.num_frames, fmt.fps, fmt.audio_path) == (expected, 25.0, speech_clip)
    assert (
        out.frames_generated == expected and abs(out.media_duration_s - wav_seconds(speech_clip)) <= 0.5 / 25
    )
    # Every chunk emits chunk_frames - motion_frames new frames (the last one what is left).
    stride = PARAMS["chunk_frames"] - PARAMS["motion_frames"]
    assert len(ctx.chunks) == math.ceil(expected / stride)
    assert [c.index for c in ctx.chunks] == list(range(len(ctx.chunks)))
    assert [c.frames for c in ctx.chunks[:-1]] == [stride] * (len(ctx.chunks) - 1)
    assert sum(c.frames for c in ctx.chunks) == expected
    assert all(c.total_ms >= c.core_ms > 0 and c.audio_embedding_ms > 0 and c.copy_ms > 0 for c in ctx.chunks)
    summary = summarize_chunks(ctx.chunks)
    assert summary["chunk_count"] == len(ctx.chunks) and summary["steady_chunk_core_ms_avg"] > 0
    assert [f for f, _ in ctx.progress_log][-1] == pytest.approx(1.0)
    assert {"audio_decode_ms", "image_load_ms", "face_detect_ms", "prepare_ms"} <= set(ctx.timings)


def test_sample_portrait_is_found_by_haar_and_a_plain_image_falls_back(
    animate: Callable[..., Any], bursts_wav: Path, tmp_path: Path
) -> None:
    _, _, out = animate(bursts_wav, max_size=128)
    assert out.extra["face_detector"] == "haar"
    x, y, w, h = out.extra["face_box"]  # output is 96x128; the drawn face is centred, upper half
    assert abs((x + w / 2) - 48) < 8 and 30 < y + h / 2 < 70

    plain = tmp_path / "plain.jpg"
    Image.new("RGB", (300, 200), (90, 140, 200)).save(plain)
    frames, _, out = animate(bursts_wav, image=plain, max_size=128)
    assert out.extra["face_detector"] == "fallback" and frames.shape[1:3] == (80, 128)


def test_mouth_opens_with_the_voice(animate: Callable[..., Any], bursts_wav: Path) -> None:
    frames, _, out = animate(bursts_wav, motion_scale=0.0)
    x, y, w, h = out.extra["face_box"]
    mouth = luma(frames[:, y + int(0.62 * h) : y + int(0.95 * h), x + int(0.3 * w) : x + int(0.7 * w)])
    darkness = 255.0 - mouth.mean(axis=(1, 2))
    # The bursts alternate 0.4 s on and 0.4 s off; frame i is loud when floor(t / 0.4) is even.
    t = (np.arange(len(frames)) + 0.5) / PARAMS["fps"]
    loud = (np.floor(t / 0.4) % 2 == 0).astype(float)
    assert np.corrcoef(darkness, loud)[0, 1] > 0.5
    assert darkness[loud == 1].mean() > darkness[loud == 0].mean() + 5


def test_never_black_and_never_frozen_even_in_silence(animate: Callable[..., Any], tmp_path: Path) -> None:
    silence = write_wav(tmp_path / "silence.wav", np.zeros(16000 * 4))
    frames, _, out = animate(silence, motion_scale=0.0, mouth_scale=0.0)
    assert out.extra["speaking_fraction"] == 0.0
    assert luma(frames).mean(axis=(1, 2)).min() > 60
    window = 2 * PARAMS["fps"]
    for start in range(0, len(frames) - window + 1):
        clip = frames[start : start + window].astype(np.int16)
        assert np.abs(np.diff(clip, axis=0)).max() > 0, f"frozen for 2 s from frame {start}"

    # And the real gate's detectors agree on the encoded stream.
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.fail("ffmpeg is required (apt-get install -y ffmpeg)")
    video = tmp_path / "silence.mp4"
    height, width = frames.shape[1:3]
    encode = [
        ffmpeg,
        "-v",
        "error",
        "-f",
        "rawvideo",
        "-pix_fmt",
        "rgb24",
        "-s",
        f"{width}x{height}",
        "-r",
        "25",
    ]
    # As the pipeline's encoder does (workers/video): x264 veryfast, zerolatency, crf 20.
    encode += ["-i", "pipe:0", "-c:v", "libx264", "-preset", "veryfast", "-tune", "zerolatency", "-crf", "20"]
    encode += ["-pix_fmt", "yuv420p", str(video)]
    subprocess.run(encode, input=frames.tobytes(), check=True)
    detect = "freezedetect=n=-60dB:d=2,blackdetect=d=0.5:pix_th=0.10:pic_th=0.98"
    log = subprocess.run(
        [ffmpeg, "-hide_banner", "-i", str(video), "-vf", detect, "-f", "null", "-"],
        capture_output=True,
        text=True,
    ).stderr
    assert "freeze_start" not in log and "black_start" not in log


def test_same_seed_same_video_and_runs_are_reentrant(animate: Callable[..., Any], bursts_wav: Path) -> None:
    first, _, _ = animate(bursts_wav, max_size=128)
    other, _, _ = animate(bursts_wav, max_size=128, seed=7)
    again, _, _ = animate(bursts_wav, max_size=128)
    assert np.array_equal(first, again)
    assert np.abs(first.astype(np.int16) - other).mean() > 0.5


def test_motion_is_continuous_across_chunks() -> None:
    fps, stride, motion = 25, 12, 4
    plan = MotionPlan(seed=3, duration_s=4.0, motion_scale=1.0)
    carried, rolls = rest_frames(motion), []
    for first in range(0, 100, stride):
        window = carried + continue_motion(plan, carried, [0.5] * stride, first, fps)
        rolls += [s.roll for s in window[len(carried) :]]
        carried = carry(window, motion)
    steps = np.abs(np.diff(rolls))
    boundaries = [first - 1 for first in range(stride, 100, stride)]
    inside = np.delete(steps, boundaries)
    assert steps[boundaries].max() <= 1.5 * inside.max()


def test_cancel_stops_between_chunks(
    model: tuple[ReferenceTalkingHeadAdapter, Any],
    make_inputs: Callable[..., JobInputs],
    speech_clip: Path,
    tmp_path: Path,
) -> None:
    adapter, handle = model
    ctx = RecordingContext(tmp_path, cancel_after=2)
    with pytest.raises(JobCanceled):
        adapter.run(
            handle,
            make_inputs("reference-talking-head", PARAMS, {"image": PORTRAIT, "audio": speech_clip}),
            ctx,
        )
    assert len(ctx.chunks) == 1


def test_bad_inputs_raise_adapter_errors(
    animate: Callable[..., Any], bursts_wav: Path, tmp_path: Path
) -> None:
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("this is not audio")
    with pytest.raises(AdapterError) as err:
        animate(not_audio)
    assert err.value.code == "invalid_audio" and err.value.message

    empty = write_wav(tmp_path / "empty.wav", np.zeros(0))
    with pytest.raises(AdapterError) as err:
        animate(empty)
    assert err.value.code == "invalid_audio"

    not_image = tmp_path / "face.png"
    not_image.write_bytes(b"\x89PNG but not really")
    with pytest.raises(AdapterError) as err:
        animate(bursts_wav, image=not_image)
    assert err.value.code == "invalid_image"
