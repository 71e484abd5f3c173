"""StreamingEncoder: frames in, MP4 out, with the detector pass on the same bitstream."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil
import pytest

from jobservice.catalog import ValidationPolicy
from jobservice.media.probe import probe_media
from tests.validation.conftest import moving_frames
from workers.validation import Expectation, validate_streamed
from workers.video import EncoderError, StreamingEncoder

W = H = 128
FPS = 25
FRAME = 1 / FPS


def encoder(tmp_path: Path, policy: ValidationPolicy, **kw: object) -> StreamingEncoder:
    args: dict[str, object] = {"out_path": tmp_path / "out.mp4", "width": W, "height": H, "fps": FPS}
    args.update(kw)
    return StreamingEncoder(policy=policy, **args)  # type: ignore[arg-type]


def media_children() -> list[psutil.Process]:
    """ffmpeg/ffprobe processes still attached to this test process (zombies included)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.name() in ("ffmpeg", "ffprobe"):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def test_streams_with_audio_and_passes(tmp_path: Path, policy: ValidationPolicy) -> None:
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is required (apt-get install -y espeak-ng)")
    speech = tmp_path / "speech.wav"
    subprocess.run(["espeak-ng", "-w", str(speech), "the gate checks every frame"], check=True)
    audio = probe_media(speech).audio
    assert audio is not None and audio.duration_s is not None and audio.duration_s > 1.0
    num_frames = round(audio.duration_s * FPS)
    duration = num_frames / FPS
    with encoder(tmp_path, policy, audio_path=speech, duration_s=duration) as enc:
        for start in range(0, num_frames, 16):  # chunks, like a model would emit them
            enc.write(moving_frames(start, min(16, num_frames - start), W, H))
        result = enc.finish()
    assert result.frames_written == num_frames and result.decoded_frames == num_frames
    assert result.black_segments == [] and result.freeze_segments == []
    assert result.decoder_errors == [] and result.decoder_returncode == 0
    assert result.finish_ms > 0 and result.decode_cpu_ms is not None and result.decode_cpu_ms > 0
    expect = Expectation(
        width=W, height=H, fps=FPS, num_frames=num_frames, duration_s=duration, require_audio=True
    )
    v = validate_streamed(path=result.path, encode=result, expect=expect, policy=policy)
    assert v.verdict == "passed", v.failed_checks
    assert v.mode == "streamed" and v.decoded_frames == num_frames
    assert v.decode_cpu_ms == pytest.approx(result.decode_cpu_ms, abs=0.01)
    facts = probe_media(result.path, count_packets=True)
    # The pre-started, pipe-fed probe in finish() saw the same file as a plain ffprobe does.
    assert result.probe is not None and result.probe_error is None
    assert result.probe.model_dump(exclude={"bit_rate"}) == facts.model_dump(exclude={"bit_rate"})
    assert result.probe.bit_rate == pytest.approx(facts.bit_rate, abs=8)
    assert facts.video is not None and facts.video.nb_frames == num_frames
    assert facts.video.nb_read_packets == num_frames
    assert facts.audio is not None and facts.audio.codec_name == "aac"
    # The audio is cut to exactly the video's length (AAC edit lists keep it sample-accurate).
    assert facts.audio.duration_s == pytest.approx(duration, abs=0.03)


def test_audio_longer_than_video_is_cut(
    tmp_path: Path, policy: ValidationPolicy, media: Callable[[str], Path]
) -> None:
    with encoder(tmp_path, policy, audio_path=media("tone60"), duration_s=60 / FPS) as enc:
        enc.write(moving_frames(0, 60, W, H))
        result = enc.finish()
    facts = probe_media(result.path)
    assert facts.audio is not None and facts.audio.duration_s == pytest.approx(2.4, abs=0.03)
    assert facts.video is not None and facts.video.nb_frames == 60


def test_black_frames_in_the_middle(tmp_path: Path, policy: ValidationPolicy) -> None:
    frames = moving_frames(0, 100, W, H)
    frames[30:70] = 0  # black from 1.2 s to 2.8 s
    with encoder(tmp_path, policy) as enc:
        enc.write(frames)
        result = enc.finish()
    [black] = result.black_segments
    assert black.start_s == pytest.approx(1.2, abs=FRAME) and black.end_s == pytest.approx(2.8, abs=FRAME)
    assert not black.open_ended
    v = validate_streamed(path=result.path, encode=result, expect=Expectation(num_frames=100), policy=policy)
    assert {c.name for c in v.failed_checks} == {"black"}


def test_black_to_the_end_is_closed_at_frames_over_fps(tmp_path: Path, policy: ValidationPolicy) -> None:
    frames = moving_frames(0, 75, W, H)
    frames[50:] = 0
    with encoder(tmp_path, policy) as enc:
        enc.write(frames)
        result = enc.finish()
    [black] = result.black_segments
    assert black.start_s == pytest.approx(2.0, abs=FRAME)
    assert black.end_s == 3.0 and black.open_ended


def test_identical_frames_are_a_freeze(tmp_path: Path, policy: ValidationPolicy) -> None:
    frames = moving_frames(0, 120, W, H)
    frames[30:100] = frames[30]  # held from 1.2 s to 4.0 s
    with encoder(tmp_path, policy) as enc:
        for chunk in np.array_split(frames, 5):
            enc.write(chunk)
        result = enc.finish()
    [freeze] = result.freeze_segments
    # A lossy encoder refines a still picture over a few frames, so the decoded frames become
    # identical (below -60 dB) a little after the held frame starts.
    assert 1.2 - FRAME <= freeze.start_s <= 1.2 + 8 * FRAME
    assert freeze.end_s == pytest.approx(4.0, abs=FRAME)
    assert result.black_segments == []
    v = validate_streamed(path=result.path, encode=result, expect=Expectation(num_frames=120), policy=policy)
    assert {c.name for c in v.failed_checks} == {"freeze"}
    assert v.freeze_segments == [freeze]


def test_write_validates_its_input(tmp_path: Path, policy: ValidationPolicy) -> None:
    with encoder(tmp_path, policy) as enc:
        with pytest.raises(ValueError, match="frames must be"):
            enc.write(np.zeros((2, H, W + 2, 3), dtype=np.uint8))
        with pytest.raises(ValueError, match="uint8"):
            enc.write(np.zeros((H, W, 3), dtype=np.float32))
        with pytest.raises(ValueError, match="frames must be"):
            enc.write(np.zeros((H, W, 4), dtype=np.uint8))
        with pytest.raises(TypeError):
            enc.write([[0]])
        enc.write(moving_frames(0, 1, W, H)[0])  # a single [H, W, 3] frame is fine
        # A non-contiguous view (here: flipped) is accepted and copied.
        enc.write(moving_frames(1, 2, W, H)[:, ::-1])
        assert enc.frames_written == 3
        result = enc.finish()
    assert result.decoded_frames == 3


def test_abort_leaves_no_file_and_no_children(tmp_path: Path, policy: ValidationPolicy) -> None:
    enc = encoder(tmp_path, policy)
    pids = enc.pids
    # encoder, decoder and the pre-started ffprobe
    assert {p.name() for p in media_children()} == {"ffmpeg", "ffprobe"} and len(media_children()) == 3
    enc.write(moving_frames(0, 10, W, H))
    enc.abort()
    enc.abort()  # idempotent
    assert not (tmp_path / "out.mp4").exists()
    assert media_children() == []
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in pids)
    with pytest.raises(EncoderError):
        enc.write(moving_frames(0, 1, W, H))


def test_exception_in_block_aborts(tmp_path: Path, policy: ValidationPolicy) -> None:
    with pytest.raises(RuntimeError, match="model crashed"):
        with encoder(tmp_path, policy) as enc:
            enc.write(moving_frames(0, 5, W, H))
            raise RuntimeError("model crashed")
    assert not (tmp_path / "out.mp4").exists()
    assert media_children() == []


def test_abort_after_finish_keeps_the_file(tmp_path: Path, policy: ValidationPolicy) -> None:
    enc = encoder(tmp_path, policy)
    enc.write(moving_frames(0, 5, W, H))
    result = enc.finish()
    enc.abort()
    assert result.path.exists()
    assert media_children() == []


def test_killed_encoder_makes_write_raise(tmp_path: Path, policy: ValidationPolicy) -> None:
    with encoder(tmp_path, policy) as enc:
        enc.write(moving_frames(0, 5, W, H))
        os.kill(enc.pids[0], signal.SIGKILL)
        with pytest.raises(EncoderError, match="stopped accepting frames"):
            for start in range(0, 200, 10):
                enc.write(moving_frames(start, 10, W, H))
    assert not (tmp_path / "out.mp4").exists()
    assert media_children() == []


def test_killed_decoder_makes_write_raise(tmp_path: Path, policy: ValidationPolicy) -> None:
    # Without its detector pass a video cannot be judged, so the encode must fail too.
    with encoder(tmp_path, policy) as enc:
        enc.write(moving_frames(0, 5, W, H))
        os.kill(enc.pids[1], signal.SIGKILL)
        with pytest.raises(EncoderError):
            for start in range(0, 500, 10):
                enc.write(moving_frames(start, 10, W, H))
    assert media_children() == []


@pytest.mark.parametrize("fps", [30000 / 1001, 12.5])
def test_fractional_rates_pass(
    tmp_path: Path, policy: ValidationPolicy, fps: float, media: Callable[[str], Path]
) -> None:
    with encoder(tmp_path, policy, fps=fps, audio_path=media("tone60"), duration_s=45 / fps) as enc:
        enc.write(moving_frames(0, 45, W, H))
        result = enc.finish()
    expect = Expectation(fps=fps, num_frames=45, duration_s=45 / fps, require_audio=True)
    v = validate_streamed(path=result.path, encode=result, expect=expect, policy=policy)
    assert v.verdict == "passed", v.failed_checks
    assert v.probe.video is not None and v.probe.video.fps == pytest.approx(fps, abs=1e-6)


def test_finish_without_frames_raises(tmp_path: Path, policy: ValidationPolicy) -> None:
    enc = encoder(tmp_path, policy)
    with pytest.raises(EncoderError, match="no frames"):
        enc.finish()
    assert media_children() == []


def test_audio_needs_a_duration(
    tmp_path: Path, policy: ValidationPolicy, media: Callable[[str], Path]
) -> None:
    with pytest.raises(ValueError, match="duration_s"):
        encoder(tmp_path, policy, audio_path=media("tone60"))


def test_missing_audio_file_surfaces_ffmpeg_message(tmp_path: Path, policy: ValidationPolicy) -> None:
    with pytest.raises(EncoderError, match="No such file"):
        with encoder(tmp_path, policy, audio_path=tmp_path / "absent.wav", duration_s=1.0) as enc:
            for _ in range(50):
                enc.write(moving_frames(0, 5, W, H))
            enc.finish()


@pytest.mark.slow
def test_trickling_frames_with_long_audio(
    tmp_path: Path, policy: ValidationPolicy, media: Callable[[str], Path]
) -> None:
    """30 s of audio while video arrives in bursts over ~4 s: the muxer must neither error nor stall.

    At 5 fps, 150 frames are 30 s of video; the audio input is 60 s and is cut to 30 s.
    """
    fps = 5
    with encoder(tmp_path, policy, fps=fps, audio_path=media("tone60"), duration_s=30.0) as enc:
        time.sleep(1.0)  # a model load: no video at all while the audio input is ready
        for start in range(0, 150, 10):
            enc.write(moving_frames(start, 10, W, H))
            time.sleep(0.2)
        result = enc.finish()
    assert "Too many packets" not in result.encoder_log
    assert result.frames_written == 150 and result.decoded_frames == 150
    expect = Expectation(fps=fps, num_frames=150, duration_s=30.0, require_audio=True)
    v = validate_streamed(path=result.path, encode=result, expect=expect, policy=policy)
    assert v.verdict == "passed", v.failed_checks
    assert v.probe.audio is not None and v.probe.audio.duration_s == pytest.approx(30.0, abs=0.03)
