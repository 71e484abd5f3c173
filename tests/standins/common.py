"""What every stand-in shares: recording what it received, the failure mode it should act out,
and writing a real video with ffmpeg.

Stand-ins run as real subprocesses (or servers) and are steered by environment variables that a
test sets through the deployment file's ``env:``:

* ``STANDIN_RECORD``: a JSONL file; each process appends what it received (argv, cwd, the
  variables of its contract, visible devices, torchrun's rank variables).
* ``STANDIN_MODE_FILE``: a file holding the failure mode to act out next ("ok" when absent).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WATCHED = (
    "CUDA_VISIBLE_DEVICES",
    "ASCEND_RT_VISIBLE_DEVICES",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "MASTER_PORT",
    "GPU_NUM",
    "FAKE_ASCEND_ENV",
    "PYTHONUNBUFFERED",
)


def record(tool: str, **extra: Any) -> None:
    """Append what this process received to $STANDIN_RECORD."""
    path = os.environ.get("STANDIN_RECORD")
    if not path:
        return
    env = {k: os.environ[k] for k in WATCHED if k in os.environ}
    env.update({k: v for k, v in os.environ.items() if k.startswith(("FLASHHEAD_", "FLASHTALK_"))})
    entry = {"tool": tool, "pid": os.getpid(), "argv": sys.argv, "cwd": os.getcwd(), "env": env, **extra}
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(entry) + "\n")


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record written so far."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def mode() -> str:
    """The failure mode to act out ("ok" by default)."""
    path = os.environ.get("STANDIN_MODE_FILE")
    if path and Path(path).exists():
        return Path(path).read_text().strip() or "ok"
    return "ok"


def audio_seconds(path: str) -> float:
    """The duration of an audio file (ffprobe)."""
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(out.strip())


def make_video(
    out: Path, *, width: int, height: int, fps: float, frames: int, black: bool = False, frozen: bool = False
) -> None:
    """An H.264 video without audio: a moving test pattern (or black, or one still frame)."""
    if black:
        source = f"color=c=black:size={width}x{height}:rate={fps}"
    elif frozen:
        source = f"testsrc2=size={width}x{height}:rate={fps},trim=end_frame=1,loop=-1:1:0"
    else:
        source = f"testsrc2=size={width}x{height}:rate={fps}"
    subprocess.run(
        ["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i", source]
        + ["-frames:v", str(frames), "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"]
        + ["-bf", "0", str(out)],
        check=True,
    )


def mux_shortest(video: Path, audio: str, out: Path) -> None:
    """What the SoulX scripts do: copy the video, encode the speech as AAC, stop at the shorter."""
    subprocess.run(
        ["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-i", str(video), "-i", audio]
        + ["-c:v", "copy", "-c:a", "aac", "-shortest", str(out)],
        check=True,
    )


def hang() -> None:
    """Sleep until killed."""
    while True:
        time.sleep(1)


_WORK_BLOCK = bytes(range(256)) * 4096  # 1 MiB: one unit of CPU work is one sha256 over it


def cpu_work(units: int) -> None:
    """A fixed amount of CPU work (``units`` sha256 passes over 1 MiB): it takes longer when other
    processes share the cores, as a model's host-side work does."""
    for _ in range(units):
        hashlib.sha256(_WORK_BLOCK).digest()


def cpu_units_per_second(trials: int = 5, seconds: float = 0.2) -> float:
    """How many units of ``cpu_work`` one core does per second here (the best of a few short trials,
    so a busy moment does not lower it): a test turns seconds of CPU into a fixed amount of work."""
    best = 0.0
    for _ in range(trials):
        started, done = time.perf_counter(), 0
        while time.perf_counter() - started < seconds:
            cpu_work(8)
            done += 8
        best = max(best, done / (time.perf_counter() - started))
    return best
