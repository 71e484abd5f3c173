"""Stand-in for SoulX-FlashHead's generate_video.py (the NPU-adapted checkout).

Honours the contract: the same flags (argparse, the same required ones and choices), the
FLASHHEAD_* variables, rank 0 writing ``<save_file>`` with ``_tmp.mp4`` first and muxing the
speech with ``-c:v copy -c:a aac -shortest``; whole 28-frame (pro) or 24-frame (lite) slices, the
last one padded, 512x512 at 25 fps. Records what it received; acts out the failure mode in
$STANDIN_MODE_FILE: ok, exit1, missing, empty, black, slow:<seconds>, hang, oom.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

from tests.standins.common import audio_seconds, hang, make_video, mode, mux_shortest, record


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt_dir", type=str, required=True)
    parser.add_argument("--wav2vec_dir", type=str, required=True)
    parser.add_argument("--model_type", type=str, required=True, choices=["pro", "lite", "pretrained"])
    parser.add_argument("--cond_image", type=str, default=None)
    parser.add_argument("--cond_image_dir", type=str, default=None)
    parser.add_argument("--audio_path", type=str, required=True)
    parser.add_argument("--audio_encode_mode", type=str, default="stream", choices=["stream", "once"])
    parser.add_argument("--save_file", type=str, default=None)
    parser.add_argument("--base_seed", type=int, default=42)
    parser.add_argument("--use_face_crop", type=bool, default=False)
    return parser.parse_args()


def main() -> int:
    args = parse()
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
    slice_frames = {"pro": 28, "lite": 24, "pretrained": 28}[args.model_type]
    chunks = math.ceil(audio_seconds(args.audio_path) * 25 / slice_frames)
    for index in range(chunks):
        print(f"Generate video chunk-{index} done", flush=True)
    save = Path(args.save_file or "sample_results/res_output.mp4")
    if act == "missing":
        return 0  # the unchecked ffmpeg mux failed: exit 0, no file
    if act == "empty":
        save.write_bytes(b"")
        return 0
    tmp = Path(str(save).replace(".mp4", "_tmp.mp4"))
    make_video(tmp, width=512, height=512, fps=25, frames=chunks * slice_frames, black=act == "black")
    mux_shortest(tmp, args.audio_path, save)
    tmp.unlink()
    print(f"Saved {save}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
