"""The FlashTalk resident worker: keeps SoulX-FlashTalk loaded and answers jobs chunk by chunk.

Runs inside the FlashTalk checkout's own Python (not jobservice's): started by the FlashTalk
adapter as ``python flashtalk_resident.py ...`` or ``torchrun --nproc-per-node N
flashtalk_resident.py ...`` with the FLASHTALK_* variables of OmniRT's NPU patch set. It imports
only the standard library at module level; numpy, librosa, torch and ``flash_talk`` come from the
checkout.

STATUS: not run on real weights here. This file runs in tests against a fake ``flash_talk``
package that mirrors upstream's signatures, return shapes and dtypes
(tests/standins/fake_flash_talk/), in both variants below; the protocol's failure paths are
exercised against a stand-in of this script (tests/standins/fake_flashtalk_resident.py).

What it relies on in ``flash_talk.inference`` (Soul-AILab/SoulX-FlashTalk): importing it reads
``flash_talk/configs/infer_params.yaml`` relative to the working directory (hence the chdir), so
the settings in force are the checkout's: plain upstream ignores the FLASHTALK_* variables, an
OmniRT-patched (or NPU-adapted) checkout applies them over the YAML at import. ``settings`` in
``ready`` and ``started`` are what this process really runs with. ``run_pipeline`` returns a
float32 tensor ``[T, H, W, 3]`` in 0..255; upstream's ``FlashTalkPipeline.generate`` already
drops the motion frames (T = frame_num - motion_frames_num) while OmniRT's patched checkout
returns all ``frame_num`` frames. The chunk's frames are kept by the count actually returned
(``frames_returned``, ``frames_case``): new frames only -> all of them; all frames -> the motion
frames dropped; any other count -> a ``model_error`` naming both numbers.

Protocol: line-delimited JSON over the Unix socket given by ``--connect`` (rank 0 only; all
ranks' prints go to the log). First message: ``{"event": "ready", "pid", "world_size",
"load_ms", "settings"}`` or ``{"event": "error", "code", "message"}``. Then, one answer per
request. Every request carries an ``"id"`` (increasing) and its answer echoes it, so the adapter
can tell the answer of a request it gave up on (a cancel while it was in flight) from the one it
awaits and skip it (workers/adapters/processes/resident_client.py):

* ``{"op": "start", "job_id", "image", "audio", "prompt", "seed", "out_dir"}`` ->
  ``{"event": "started", "chunks", "frames_per_chunk", "width", "height", "fps", "settings"}``: loads the
  speech (16 kHz mono), pads the last slice with silence, conditions on the image and prompt.
* ``{"op": "chunk", "index"}`` -> ``{"event": "chunk", "index", "frames", "frames_returned",
  "frames_case", "path", "audio_embedding_ms", "core_ms", "copy_ms", "total_ms"}``: the chunk's
  new frames as raw RGB24
  ``[frames, height, width, 3]`` in ``path`` (the caller deletes it).
* ``{"op": "end"}`` -> ``{"event": "ended"}``: drops the job (also after a cancel).
* ``{"op": "shutdown"}``: exits (no answer).

Errors answer ``{"event": "error", "code": "out_of_memory" | "bad_request" | "model_error",
"message"}``; the worker stays loaded (after emptying the allocator's cache).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any


class ServedJob:
    """The state of the job being served: audio slices, the rolling audio window, the out folder."""

    def __init__(self, slices: Any, window: Any, out_dir: Path) -> None:
        self.slices = slices
        self.window = window
        self.out_dir = out_dir


class ResidentPipeline:
    """The loaded pipeline and the ops it serves (every rank runs every op; rank 0 answers)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        sys.path.insert(0, args.repo)
        os.chdir(args.repo)
        # Importing reads flash_talk/configs/infer_params.yaml from the cwd (patched checkouts
        # then apply the FLASHTALK_* variables); upstream's flash_talk has no __init__.py.
        from flash_talk import inference

        self.inference: Any = inference
        self.params: dict[str, Any] = dict(inference.infer_params)
        self.pipeline = inference.get_pipeline(
            world_size=self.world_size,
            ckpt_dir=args.ckpt_dir,
            wav2vec_dir=args.wav2vec_dir,
            cpu_offload=args.cpu_offload,
        )
        self.job: ServedJob | None = None

    def settings(self) -> dict[str, Any]:
        """The generation settings in force: ``infer_params`` as the checkout resolved it."""
        keys = (
            "height",
            "width",
            "frame_num",
            "motion_frames_num",
            "sample_steps",
            "color_correction_strength",
            "sample_shift",
            "tgt_fps",
            "sample_rate",
            "cached_audio_duration",
        )
        return {k: self.params.get(k) for k in keys}

    def handle(self, message: dict[str, Any]) -> dict[str, Any]:
        """Serve one op (on every rank); the answer is sent by rank 0."""
        op = message.get("op")
        if op == "start":
            return self._start(message)
        if op == "chunk":
            return self._chunk(int(message["index"]))
        if op == "end":
            self.job = None
            return {"event": "ended"}
        return {"event": "error", "code": "bad_request", "message": f"unknown op {op!r}"}

    def _start(self, message: dict[str, Any]) -> dict[str, Any]:
        import librosa
        import numpy as np

        p = self.params
        for name in ("image", "audio"):
            if not Path(message[name]).exists():
                return {
                    "event": "error",
                    "code": "bad_request",
                    "message": f"{name} {message[name]} not found",
                }
        self.inference.get_base_data(
            self.pipeline,
            input_prompt=message["prompt"],
            cond_image=message["image"],
            base_seed=int(message["seed"]),
        )
        speech, _ = librosa.load(message["audio"], sr=p["sample_rate"], mono=True)
        new_frames = p["frame_num"] - p["motion_frames_num"]
        slice_samples = new_frames * p["sample_rate"] // p["tgt_fps"]
        # Pad the last slice with silence so the speech's tail gets frames (the adapter trims them).
        pad = (-len(speech)) % slice_samples
        speech = np.concatenate([speech, np.zeros(pad, dtype=speech.dtype)])
        window_len = p["sample_rate"] * p["cached_audio_duration"]
        window: deque[float] = deque([0.0] * window_len, maxlen=window_len)
        self.job = ServedJob(speech.reshape(-1, slice_samples), window, Path(message["out_dir"]))
        return {
            "event": "started",
            "chunks": len(self.job.slices),
            "frames_per_chunk": new_frames,
            "width": p["width"],
            "height": p["height"],
            "fps": p["tgt_fps"],
            "settings": self.settings(),
        }

    def _chunk(self, index: int) -> dict[str, Any]:
        import numpy as np

        if self.job is None or index >= len(self.job.slices):
            return {
                "event": "error",
                "code": "bad_request",
                "message": f"no chunk {index} in the current job",
            }
        p = self.params
        started = time.perf_counter()
        self.job.window.extend(self.job.slices[index].tolist())
        end_idx = p["cached_audio_duration"] * p["tgt_fps"]
        t = time.perf_counter()
        embedding = self.inference.get_audio_embedding(
            self.pipeline, np.array(self.job.window), end_idx - p["frame_num"], end_idx
        )
        embed_ms = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        video = self.inference.run_pipeline(self.pipeline, embedding)
        core_ms = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        returned = int(video.shape[0])
        case, skip = new_frames_of(returned, p["frame_num"], p["motion_frames_num"])
        if case is None:
            return {
                "event": "error",
                "code": "model_error",
                "message": (
                    f"run_pipeline returned {returned} frames for chunk {index}; expected "
                    f"{p['frame_num'] - p['motion_frames_num']} (new frames only, as upstream's "
                    f"FlashTalkPipeline.generate returns) or {p['frame_num']} (frame_num, all frames)"
                ),
            }
        # float32 0..255 -> uint8 by truncation, as upstream's save_video does.
        frames = video[skip:].cpu().numpy().astype(np.uint8)
        copy_ms = (time.perf_counter() - t) * 1000
        path = self.job.out_dir / f"chunk_{index:05d}.rgb"
        if self.rank == 0:
            frames.tofile(path)
        return {
            "event": "chunk",
            "index": index,
            "frames": int(frames.shape[0]),
            "frames_returned": returned,
            "frames_case": case,
            "path": str(path),
            "audio_embedding_ms": round(embed_ms, 3),
            "core_ms": round(core_ms, 3),
            "copy_ms": round(copy_ms, 3),
            "total_ms": round((time.perf_counter() - started) * 1000, 3),
        }


def new_frames_of(returned: int, frame_num: int, motion_frames_num: int) -> tuple[str | None, int]:
    """Which frames of a chunk of ``returned`` frames are new: (case, frames to skip).

    Upstream's pipeline returns only the new frames; OmniRT's patched checkout returns all
    ``frame_num`` (the first ``motion_frames_num`` repeat the previous chunk's tail). Any other
    count is not a FlashTalk chunk: case None.
    """
    if returned == frame_num - motion_frames_num:
        return "new_frames_only", 0
    if returned == frame_num:
        return "all_frames", motion_frames_num
    return None, 0


def _error(exc: BaseException) -> dict[str, Any]:
    text = f"{type(exc).__name__}: {exc}"
    oom = "out of memory" in text.lower() or "OutOfMemory" in text
    if oom:
        _empty_cache()
    return {"event": "error", "code": "out_of_memory" if oom else "model_error", "message": text[:2000]}


def _empty_cache() -> None:
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        npu = getattr(torch, "npu", None)
        if npu is not None:
            npu.empty_cache()
    except Exception:  # noqa: BLE001, S110 - best effort
        pass


def _broadcast(message: dict[str, Any] | None, world_size: int) -> dict[str, Any]:
    """Rank 0's op to every rank (FlashTalk initialised torch.distributed under torchrun)."""
    if world_size == 1:
        assert message is not None
        return message
    import torch.distributed as dist

    box = [message]
    dist.broadcast_object_list(box, src=0)
    received: dict[str, Any] = box[0] or {"op": "shutdown"}
    return received


def serve(args: argparse.Namespace) -> int:
    """Load the model, then serve ops until shutdown or until the adapter goes away."""
    started = time.perf_counter()
    conn: socket.socket | None = None
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(args.connect)
    try:
        resident = ResidentPipeline(args)
    except Exception as exc:  # noqa: BLE001 - reported to the adapter, then we exit
        if conn is not None:
            conn.sendall(json.dumps(_error(exc)).encode() + b"\n")
        raise
    reader = conn.makefile("rb") if conn is not None else None
    if conn is not None:
        ready = {
            "event": "ready",
            "pid": os.getpid(),
            "world_size": resident.world_size,
            "load_ms": round((time.perf_counter() - started) * 1000, 3),
            "settings": resident.settings(),
        }
        conn.sendall(json.dumps(ready).encode() + b"\n")
    while True:
        message: dict[str, Any] | None = None
        if reader is not None:
            line = reader.readline()
            message = json.loads(line) if line else {"op": "shutdown"}
        message = _broadcast(message, resident.world_size)
        if message.get("op") == "shutdown":
            return 0
        try:
            answer = resident.handle(message)
        except Exception as exc:  # noqa: BLE001 - one job's failure must not end the resident
            answer = _error(exc)
        if conn is not None:
            conn.sendall(json.dumps({**answer, "id": message.get("id")}).encode() + b"\n")


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--connect", required=True, help="Unix socket of the adapter.")
    parser.add_argument("--repo", required=True, help="The SoulX-FlashTalk checkout.")
    parser.add_argument("--ckpt_dir", required=True)
    parser.add_argument("--wav2vec_dir", required=True)
    parser.add_argument("--cpu_offload", action="store_true")
    return serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
