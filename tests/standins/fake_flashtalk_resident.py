"""Stand-in for the FlashTalk resident worker: the same command line and protocol as
workers/adapters/soulx/flashtalk_resident.py, with frames from a moving pattern instead of the model.
It exists for the failure paths (crash, hang, OOM, slow answers); the resident script itself runs
against a fake upstream ``flash_talk`` package in tests/realmodels/test_flashtalk_upstream.py.

It plays the resident on an OmniRT-PATCHED checkout: settings from the FLASHTALK_* variables
(plain upstream ignores them and runs its infer_params.yaml) and ``run_pipeline`` returning all
``frame_num`` frames (upstream returns only the new ones); it reports both in its answers as the
real resident does. It pads the last audio slice, answers start / chunk / end / shutdown, each
answer carrying its request's ``id``. Records its launch and every op. Failure modes from $STANDIN_MODE_FILE, read at each op:
ok, slow_chunks:<s>, slow_start:<s>, slow_end:<s>, oom (an error answer, then it keeps serving),
crash (exits during a chunk), hang (never answers a chunk), black (black frames), load_fail (exits
while loading), load_oom.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import sys
import time
from pathlib import Path

import numpy as np

from tests.standins.common import audio_seconds, hang, mode, record


def frames_for(index: int, count: int, height: int, width: int, black: bool) -> np.ndarray:
    frames = np.zeros((count, height, width, 3), dtype=np.uint8)
    if black:
        return frames
    frames[:] = 120
    for i in range(count):
        t = index * count + i
        frames[i, :, (t * 7) % width : (t * 7) % width + 12] = (250, 60, 60)
        frames[i, (t * 5) % height, :] = (60, 250, 60)
    return frames


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connect", required=True)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--ckpt_dir", required=True)
    parser.add_argument("--wav2vec_dir", required=True)
    parser.add_argument("--cpu_offload", action="store_true")
    args = parser.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    act = mode()
    record("flashtalk_resident", rank=rank, mode=act)
    done = Path(f"{args.connect}.done")
    if rank != 0:
        # Peers wait in the "broadcast loop" until rank 0 shuts down (or the group is stopped).
        while not done.exists():
            time.sleep(0.05)
        return 0
    settings = {
        "height": int(os.environ["FLASHTALK_HEIGHT"]),
        "width": int(os.environ["FLASHTALK_WIDTH"]),
        "frame_num": int(os.environ["FLASHTALK_FRAME_NUM"]),
        "motion_frames_num": int(os.environ["FLASHTALK_MOTION_FRAMES_NUM"]),
        "sample_steps": int(os.environ["FLASHTALK_SAMPLE_STEPS"]),
        "color_correction_strength": float(os.environ["FLASHTALK_COLOR_CORRECTION_STRENGTH"]),
        "tgt_fps": int(os.environ.get("FLASHTALK_TGT_FPS", "25")),
    }
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(args.connect)
    send = lambda message: conn.sendall(json.dumps(message).encode() + b"\n")  # noqa: E731
    print(f"loading FlashTalk from {args.ckpt_dir} with {settings}", flush=True)
    if act == "load_fail":
        print("RuntimeError: checkpoint shard missing", flush=True)
        return 1
    if act == "load_oom":
        send({"event": "error", "code": "out_of_memory", "message": "NPU out of memory while loading"})
        return 1
    send(
        {
            "event": "ready",
            "pid": os.getpid(),
            "world_size": int(os.environ.get("WORLD_SIZE", "1")),
            "load_ms": 5.0,
            "settings": settings,
        }
    )
    reader = conn.makefile("rb")
    per_chunk = settings["frame_num"] - settings["motion_frames_num"]
    try:
        return serve(reader, send, settings, per_chunk, done)
    finally:
        done.touch()


def serve(reader, reply, settings, per_chunk, done) -> int:  # type: ignore[no-untyped-def]
    job: dict | None = None
    for line in reader:
        message = json.loads(line)
        act = mode()
        record(
            "flashtalk_op", op=message.get("op"), id=message.get("id"), index=message.get("index"), mode=act
        )
        op = message.get("op")
        send = _answering(message.get("id"), reply)
        if op in ("start", "end"):
            time.sleep(_seconds(act, f"{op}:"))
        if op == "shutdown":
            done.touch()
            return 0
        if op == "start":
            if not Path(message["image"]).exists():
                send({"event": "error", "code": "bad_request", "message": "image not found"})
                continue
            chunks = math.ceil(audio_seconds(message["audio"]) * settings["tgt_fps"] / per_chunk)
            job = {"chunks": chunks, "out": Path(message["out_dir"]), "black": act == "black"}
            send(
                {
                    "event": "started",
                    "chunks": chunks,
                    "frames_per_chunk": per_chunk,
                    "width": settings["width"],
                    "height": settings["height"],
                    "fps": settings["tgt_fps"],
                    "settings": settings,
                }
            )
        elif op == "chunk":
            index = int(message["index"])
            if job is None or index >= job["chunks"]:
                send({"event": "error", "code": "bad_request", "message": f"no chunk {index}"})
                continue
            if act.startswith("slow_chunks:"):
                time.sleep(_seconds(act, "chunks:"))
            if act == "crash":
                print("Segmentation fault in rank 0", flush=True)
                os._exit(139)
            if act == "hang":
                hang()
            if act == "oom":
                print("torch.OutOfMemoryError: NPU out of memory. Tried to allocate 1.20 GiB", flush=True)
                send(
                    {
                        "event": "error",
                        "code": "out_of_memory",
                        "message": "NPU out of memory. Tried to allocate 1.20 GiB",
                    }
                )
                continue
            started = time.perf_counter()
            frames = frames_for(index, per_chunk, settings["height"], settings["width"], job["black"])
            path = job["out"] / f"chunk_{index:05d}.rgb"
            frames.tofile(path)
            print(f"Generate video chunk-{index} done", flush=True)
            total = (time.perf_counter() - started) * 1000
            core = 900.0 if index else 6000.0  # chunk 0 is slow, as in the seed benchmark
            send(
                {
                    "event": "chunk",
                    "index": index,
                    "frames": per_chunk,
                    "frames_returned": settings["frame_num"],
                    "frames_case": "all_frames",
                    "path": str(path),
                    "audio_embedding_ms": 21.0,
                    "core_ms": core,
                    "copy_ms": 33.0,
                    "total_ms": core + 54.0 + total,
                }
            )
        elif op == "end":
            job = None
            send({"event": "ended"})
        else:
            send({"event": "error", "code": "bad_request", "message": f"unknown op {op}"})
    return 0


def _answering(request_id, reply):  # type: ignore[no-untyped-def]
    """``reply`` with the request's id added to every answer (the protocol's pairing)."""
    return lambda answer: reply({**answer, "id": request_id})


def _seconds(act: str, what: str) -> float:
    """The pause of a ``slow_<what><seconds>`` mode, 0 for any other mode."""
    prefix = f"slow_{what}"
    return float(act[len(prefix) :]) if act.startswith(prefix) else 0.0


if __name__ == "__main__":
    sys.exit(main())
