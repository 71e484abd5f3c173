"""Measure what the output gate costs on a 10 s 512x512 clip; prints one JSON line last.

    .venv/bin/python scripts/bench_validation.py [--runs 3]

* ``ffprobe_ms``: ffprobe -count_packets of the finished file.
* ``file_gate_ms``: ``validate_file`` (ffprobe plus one detector decode pass, concurrently).
* ``streamed_tail_ms``: last frame written -> validated: ``StreamingEncoder.finish()`` plus
  ``validate_streamed``. Frames are paced at 4x real time (a fast model), so the decode pass keeps
  up as it would in production; ``burst_tail_ms`` writes them as fast as the pipe takes them,
  the worst case for the tail.

Medians of ``--runs``. ``x_realtime`` is clip seconds per second of gate. Measurement only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobservice.catalog import ValidationPolicy  # noqa: E402
from jobservice.media.probe import probe_media  # noqa: E402
from workers.validation import Expectation, validate_file, validate_streamed  # noqa: E402
from workers.video import StreamingEncoder  # noqa: E402

SIZE, FPS, SECONDS = 512, 25, 10
FRAMES = FPS * SECONDS


def make_clip(folder: Path) -> tuple[Path, Path]:
    """A 10 s testsrc2 clip with AAC audio (+faststart) and a matching WAV."""
    clip, wav = folder / "clip.mp4", folder / "tone.wav"
    src = ["-f", "lavfi", "-i", f"testsrc2=size={SIZE}x{SIZE}:rate={FPS}:duration={SECONDS}"]
    tone = ["-f", "lavfi", "-i", f"sine=frequency=440:sample_rate=48000:duration={SECONDS}"]
    base = ["ffmpeg", "-hide_banner", "-nostdin", "-v", "error", "-y"]
    subprocess.run(
        [*base, *src, *tone, "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p",
         "-c:a", "aac", "-shortest", "-movflags", "+faststart", str(clip)],
        check=True,
    )  # fmt: skip
    subprocess.run([*base, *tone, str(wav)], check=True)
    return clip, wav


def frames_chunk(start: int, count: int) -> np.ndarray:
    """Moving-gradient RGB frames, like a model's chunk."""
    x = np.arange(SIZE, dtype=np.int32)[None, :]
    y = np.arange(SIZE, dtype=np.int32)[:, None]
    out = np.empty((count, SIZE, SIZE, 3), dtype=np.uint8)
    for k in range(count):
        i = start + k
        out[k, ..., 0] = (x + 4 * i) % 256
        out[k, ..., 1] = (y + 2 * i) % 256
        out[k, ..., 2] = (x + y + 8 * i) % 256
    return out


def streamed_once(folder: Path, wav: Path, frames: np.ndarray, pace_fps: float | None) -> dict[str, float]:
    """One streamed encode; returns the tail figures in ms."""
    policy = ValidationPolicy()
    out = folder / "streamed.mp4"
    chunk = 25
    with StreamingEncoder(
        out_path=out, width=SIZE, height=SIZE, fps=FPS, policy=policy, audio_path=wav, duration_s=SECONDS
    ) as enc:
        t0 = time.perf_counter()
        for start in range(0, FRAMES, chunk):
            enc.write(frames[start : start + chunk])
            if pace_fps:
                # Sleep until this chunk's due time: a model producing pace_fps frames per second.
                due = t0 + (start + chunk) / pace_fps
                time.sleep(max(0.0, due - time.perf_counter()))
        tail_start = time.perf_counter()
        result = enc.finish()
        expect = Expectation(
            width=SIZE, height=SIZE, fps=FPS, num_frames=FRAMES, duration_s=SECONDS, require_audio=True
        )
        v = validate_streamed(path=out, encode=result, expect=expect, policy=policy)
        tail_ms = (time.perf_counter() - tail_start) * 1000.0
    if v.verdict != "passed":
        print(f"warning: streamed clip failed: {[c.name for c in v.failed_checks]}", file=sys.stderr)
    return {
        "tail_ms": tail_ms,
        "finish_ms": result.finish_ms,
        "validate_ms": v.elapsed_ms,
        "decode_cpu_ms": result.decode_cpu_ms or 0.0,
    }


def main() -> None:
    """Run the measurements and print the summary JSON as the last line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    med = statistics.median
    with tempfile.TemporaryDirectory(prefix="bench-validation-") as tmp:
        folder = Path(tmp)
        clip, wav = make_clip(folder)
        policy = ValidationPolicy()
        expect = Expectation(width=SIZE, height=SIZE, fps=FPS, num_frames=FRAMES, duration_s=SECONDS)

        probe_ms, gate_ms, gate_cpu = [], [], []
        for _ in range(args.runs):
            t = time.perf_counter()
            probe_media(clip, count_packets=True)
            probe_ms.append((time.perf_counter() - t) * 1000.0)
            v = validate_file(path=clip, expect=expect, policy=policy)
            assert v.verdict == "passed", v.failed_checks
            gate_ms.append(v.elapsed_ms)
            gate_cpu.append(v.decode_cpu_ms or 0.0)

        frames = frames_chunk(0, FRAMES)
        paced = [streamed_once(folder, wav, frames, pace_fps=4 * FPS) for _ in range(args.runs)]
        burst = [streamed_once(folder, wav, frames, pace_fps=None) for _ in range(args.runs)]

    def figure(runs: list[dict[str, float]], key: str) -> float:
        return round(med(r[key] for r in runs), 1)

    summary = {
        "clip": f"{SECONDS}s {SIZE}x{SIZE} {FPS}fps h264+aac",
        "runs": args.runs,
        "ffprobe_ms": round(med(probe_ms), 1),
        "file_gate_ms": round(med(gate_ms), 1),
        "file_gate_x_realtime": round(SECONDS / (med(gate_ms) / 1000.0), 1),
        "file_gate_decode_cpu_ms": round(med(gate_cpu), 1),
        "streamed_tail_ms": figure(paced, "tail_ms"),
        "streamed_x_realtime": round(SECONDS / (figure(paced, "tail_ms") / 1000.0), 1),
        "streamed_finish_ms": figure(paced, "finish_ms"),
        "streamed_validate_ms": figure(paced, "validate_ms"),
        "streamed_decode_cpu_ms": figure(paced, "decode_cpu_ms"),
        "burst_tail_ms": figure(burst, "tail_ms"),
        "burst_finish_ms": figure(burst, "finish_ms"),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
