"""Stand-in for SoulX-FlashHead's generate_video.py (the NPU-adapted checkout).

Honours the contract: the same flags (argparse, the same required ones and choices), the
FLASHHEAD_* variables, rank 0 writing ``<save_file>`` with ``_tmp.mp4`` first and muxing the
speech with ``-c:v copy -c:a aac -shortest``; whole 28-frame (pro) or 24-frame (lite) slices, the
last one padded (``--audio_encode_mode once``: upstream's shorter count, ``stream_or_once``),
512x512 at 25 fps; ``--model_type`` checked by assertion as upstream's ``_validate_args`` does. Records what it received; acts out the failure mode in
$STANDIN_MODE_FILE: ok, exit1, missing, empty, black, slow:<seconds>, hang, oom, and
``slower:<factor>`` (ok, with its compute stretched by the factor).

Its compute, two ways. $STANDIN_COMPUTE_S: the run lasts that many seconds whatever its own ffmpeg
work took (a steady figure that a busy host hardly moves). $STANDIN_CPU_WORK (units of
``common.cpu_work``) with $STANDIN_DEVICE_S: each chunk does its share of that fixed CPU work and
waits its share of the device seconds, and nothing is padded, so like a real model's host-side
work (and its own video writing) the run takes longer when other processes share the cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from tests.standins.common import audio_seconds, cpu_work, hang, make_video, mode, mux_shortest, record


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt_dir", type=str, required=True)
    parser.add_argument("--wav2vec_dir", type=str, required=True)
    parser.add_argument("--model_type", type=str, default=None)
    parser.add_argument("--cond_image", type=str, default=None)
    parser.add_argument("--cond_image_dir", type=str, default=None)
    parser.add_argument("--audio_path", type=str, required=True)
    parser.add_argument("--audio_encode_mode", type=str, default="stream", choices=["stream", "once"])
    parser.add_argument("--save_file", type=str, default=None)
    parser.add_argument("--base_seed", type=int, default=42)
    parser.add_argument("--use_face_crop", type=bool, default=False)
    args = parser.parse_args()
    # Upstream's _validate_args: assertions (a traceback, exit status 1), not argparse choices.
    assert args.model_type in ("pro", "lite"), "Please specify the model name (pro, lite)."
    assert args.cond_image_dir is not None or args.cond_image is not None, (
        "Please specify the condition image"
    )
    return args


def main() -> int:
    args = parse()
    started = time.perf_counter()
    rank = int(os.environ.get("RANK", "0"))
    act = mode()
    record("generate_video.py", rank=rank, mode=act)
    for path in (args.ckpt_dir, args.wav2vec_dir, args.cond_image, args.audio_path):
        if not path or not Path(path).exists():
            print(f"FileNotFoundError: {path}", file=sys.stderr)
            return 1
    print(f"[rank {rank}] loading {args.model_type} from {args.ckpt_dir}", flush=True)
    if act == "hang":
        hang()
    if act.startswith("slow:"):
        time.sleep(float(act.split(":", 1)[1]))
    if act == "oom":
        print("Traceback (most recent call last):", file=sys.stderr)
        print(
            "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.96 GiB total)",
            file=sys.stderr,
        )
        return 1
    if act == "exit1":
        print("Traceback (most recent call last):\nValueError: bad checkpoint shard", file=sys.stderr)
        return 1
    if rank != 0:
        return 0  # only rank 0 writes the video
    slice_frames = {"pro": 28, "lite": 24}[args.model_type]
    chunks, frames = stream_or_once(audio_seconds(args.audio_path), slice_frames, args.audio_encode_mode)
    # Benchmarks: the run lasts $STANDIN_COMPUTE_S seconds (0: as fast as it can) times the factor of
    # mode "slower:<factor>", half in the chunk loop and the rest waited out after the video is
    # written, so its own ffprobe/ffmpeg time (which a busy machine stretches) does not count.
    factor = float(act.split(":", 1)[1]) if act.startswith("slower:") else 1.0
    work = round(int(os.environ.get("STANDIN_CPU_WORK", "0")) * factor)
    device_s = float(os.environ.get("STANDIN_DEVICE_S", "0")) * factor
    budget = 0.0 if work else float(os.environ.get("STANDIN_COMPUTE_S", "0")) * factor
    per_chunk = budget / 2 / chunks
    for index in range(chunks):
        began = time.perf_counter()
        if work:
            cpu_work(work // chunks + (1 if index < work % chunks else 0))
            time.sleep(device_s / chunks)
        else:
            time.sleep(per_chunk)
        cost = time.perf_counter() - began
        print(f"Generate video chunk-{index} done, cost time: {cost:.3f}s", flush=True)  # upstream's line
    save = Path(args.save_file or "sample_results/res_output.mp4")
    if act == "missing":
        return 0  # the unchecked ffmpeg mux failed: exit 0, no file
    if act == "empty":
        save.write_bytes(b"")
        return 0
    tmp = Path(str(save).replace(".mp4", "_tmp.mp4"))
    make_video(tmp, width=512, height=512, fps=25, frames=frames, black=act == "black")
    mux_shortest(tmp, args.audio_path, save)
    tmp.unlink()
    time.sleep(max(0.0, started + budget - time.perf_counter()) if budget else 0.0)
    print(f"Saved {save}", flush=True)
    return 0


def stream_or_once(seconds: float, new: int, encode_mode: str) -> tuple[int, int]:
    """(chunks, frames) as upstream's generate(): stream pads the speech to whole slices, every
    chunk bringing ``new`` frames; once pads it to 33 frames plus whole slices, then makes one
    chunk fewer (33 frames, then ``new`` each), so its video ends before the speech."""
    samples, per_frame = round(seconds * 16000), 640
    if encode_mode == "stream":
        chunks = -(-samples // (new * per_frame))
        return chunks, chunks * new
    padded = samples + (-(samples - 33 * per_frame)) % (new * per_frame)
    chunks = (padded // per_frame - 33) // new
    return chunks, (33 + new * (chunks - 1)) if chunks > 0 else 0


if __name__ == "__main__":
    sys.exit(main())
