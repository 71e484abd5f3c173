"""Crafted media for the gate tests, made once per session with ffmpeg's lavfi sources.

Small (256x256, 25 fps) and short (4-6 s) so the whole suite stays fast.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from jobservice.catalog import ValidationPolicy

SIZE = 256
FPS = 25
ENCODE = ["-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p"]
AAC = ["-c:a", "aac", "-b:a", "96k"]


@pytest.fixture(autouse=True)
def _needs_ffmpeg() -> None:
    if shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None:
        pytest.fail("ffmpeg/ffprobe are required (apt-get install -y ffmpeg)")


def ffmpeg(*args: str) -> None:
    """Run ffmpeg quietly; fail the test run with its message if it fails."""
    subprocess.run(["ffmpeg", "-hide_banner", "-nostdin", "-v", "error", "-y", *args], check=True)


def testsrc(seconds: float) -> list[str]:
    """A moving test pattern input."""
    return ["-f", "lavfi", "-i", f"testsrc2=size={SIZE}x{SIZE}:rate={FPS}:duration={seconds}"]


def sine(seconds: float, rate: int = 48000) -> list[str]:
    """A tone input."""
    return ["-f", "lavfi", "-i", f"sine=frequency=440:sample_rate={rate}:duration={seconds}"]


def moving_frames(start: int, count: int, width: int = SIZE, height: int = SIZE) -> np.ndarray:
    """``count`` RGB frames of a scrolling gradient, all different and far from black."""
    x = np.arange(width)[None, :]
    y = np.arange(height)[:, None]
    frames = np.empty((count, height, width, 3), dtype=np.uint8)
    for k in range(count):
        i = start + k
        frames[k, ..., 0] = (x + 4 * i) % 256
        frames[k, ..., 1] = (y + 2 * i) % 256
        frames[k, ..., 2] = (x + y + 8 * i) % 256
    return frames


@pytest.fixture(scope="session")
def media(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``media(name)`` -> path of a crafted file, made on first use."""
    root = tmp_path_factory.mktemp("media")
    made: dict[str, Path] = {}

    def build(name: str) -> Path:
        if name in made:
            return made[name]
        out = root / f"{name}.mp4"
        if name == "clean":  # 4 s, 100 frames, with audio
            ffmpeg(*testsrc(4), *sine(4), *ENCODE, *AAC, "-shortest", "-movflags", "+faststart", str(out))
        elif name == "clean6":  # 6 s, 150 frames, the source of the truncated file
            ffmpeg(*testsrc(6), *sine(6), *ENCODE, *AAC, "-shortest", "-movflags", "+faststart", str(out))
        elif name == "no_audio":
            ffmpeg(*testsrc(4), *ENCODE, str(out))
        elif name == "half_black":  # 2 s moving, then black to the end
            black = ["-f", "lavfi", "-i", f"color=c=black:size={SIZE}x{SIZE}:rate={FPS}:duration=2"]
            graph = "[0:v][1:v]concat=n=2:v=1:a=0[v]"
            ffmpeg(*testsrc(2), *black, *sine(4), "-filter_complex", graph, "-map", "[v]", "-map", "2:a",
                   *ENCODE, *AAC, "-shortest", str(out))  # fmt: skip
        elif name == "frozen_mid":  # moving 0-1.6 s, one frame held 1.6-4.0 s, moving 4.0-5.0 s
            graph = (
                "[0:v]split=3[a][b][c];"
                "[a]trim=0:1.6,setpts=PTS-STARTPTS[p];"
                "[b]trim=1.6:1.64,setpts=PTS-STARTPTS,tpad=stop_mode=clone:stop_duration=2.36[q];"
                "[c]trim=4:5,setpts=PTS-STARTPTS[r];[p][q][r]concat=n=3:v=1:a=0[v]"
            )
            ffmpeg(*testsrc(5), "-filter_complex", graph, "-map", "[v]", *ENCODE, str(out))
        elif name == "frozen_eof":  # moving 0-2 s, then one frame held to the end (5 s)
            graph = "[0:v]trim=0:2.04,setpts=PTS-STARTPTS,tpad=stop_mode=clone:stop_duration=2.96[v]"
            ffmpeg(*testsrc(3), "-filter_complex", graph, "-map", "[v]", *ENCODE, str(out))
        elif name == "truncated":  # moov at the front, second half of the data cut off
            data = build("clean6").read_bytes()
            out.write_bytes(data[: len(data) // 2])
        elif name == "garbage":
            out.write_bytes(np.random.default_rng(7).integers(0, 256, 200_000, dtype=np.uint8).tobytes())
        elif name == "tone60":  # a long WAV for the trickle test
            out = root / "tone60.wav"
            ffmpeg(*sine(60, rate=16000), str(out))
        else:
            raise KeyError(name)
        made[name] = out
        return out

    return build


@pytest.fixture(scope="session")
def policy() -> ValidationPolicy:
    """The default gate policy: no black, no freeze, 1 frame and 0.12 s of slack."""
    return ValidationPolicy()
