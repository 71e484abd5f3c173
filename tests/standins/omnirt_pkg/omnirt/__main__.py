"""Stand-in for ``python -m omnirt generate``: OmniRT's request flags, one JSON line on stdout
(``{"outputs": [Artifact], "metadata": RunReport}``), exit 2 for request errors (argparse's own
exit code too), 1 for crashes. Failure modes from $STANDIN_MODE_FILE: ok, request_error, budget,
crash, oom, lying (claims a file it did not write), inline (returns the video as base64), black.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import uuid
from pathlib import Path

from tests.standins.common import audio_seconds, make_video, mode, mux_shortest, record

FPS = {"wav2lip": 30, "quicktalk": 25, "musetalk": 25}


def main() -> int:
    parser = argparse.ArgumentParser(prog="omnirt")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate")
    gen.add_argument("--task", required=True, choices=["text2video", "image2video", "audio2video"])
    gen.add_argument("--model", required=True)
    gen.add_argument("--backend", default="auto", choices=["auto", "cuda", "ascend", "cpu-stub"])
    gen.add_argument("--config")
    for flag in ("--prompt", "--negative-prompt", "--image", "--audio", "--preset", "--output-dir"):
        gen.add_argument(flag)
    for flag in ("--num-frames", "--fps", "--num-inference-steps", "--seed", "--width", "--height"):
        gen.add_argument(flag, type=int)
    gen.add_argument("--guidance-scale", type=float)
    gen.add_argument("--json", action="store_true")
    gen.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    act = mode()
    config = json.loads(Path(args.config).read_text()) if args.config else {}
    record("omnirt", mode=act, config=config)
    print(f"omnirt: running {args.model} ({args.task}) on {args.backend}", file=sys.stderr)
    if act == "request_error":
        print("omnirt: error: unsupported config key 'turbo' for wav2lip", file=sys.stderr)
        return 2
    if act == "budget":
        print(
            "InsufficientMemoryError: soulx-flashhead-1.3b needs 48.0 GB, 12.5 GB available", file=sys.stderr
        )
        return 2
    if act == "crash":
        print(
            "Traceback (most recent call last):\nRuntimeError: FlashHead launch failed with exit code 1",
            file=sys.stderr,
        )
        return 1
    if act == "oom":
        print(
            "Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory.", file=sys.stderr
        )
        return 1
    out_dir = Path(args.output_dir or "outputs")
    out_dir.mkdir(parents=True, exist_ok=True)
    size = 256
    if args.task == "audio2video":
        fps = args.fps or FPS.get(args.model, 25)
        frames = round(audio_seconds(args.audio) * fps)
    else:
        fps, frames = args.fps or 16, args.num_frames or 33
    path = out_dir / f"{args.model}-{uuid.uuid4().hex[:6]}.mp4"
    if act != "lying":
        silent = out_dir / "video-only.mp4"
        make_video(
            silent if args.audio else path,
            width=size,
            height=size,
            fps=fps,
            frames=frames,
            black=act == "black",
        )
        if args.audio:
            mux_shortest(silent, args.audio, path)
    artifact = {
        "kind": "video",
        "path": str(path),
        "mime": "video/mp4",
        "width": size,
        "height": size,
        "num_frames": frames,
        "transport": "path",
    }
    if act == "inline":
        artifact.update(transport="inline_bytes", data_b64=base64.b64encode(path.read_bytes()).decode())
    report = {
        "schema_version": "1.0.0",
        "run_id": str(uuid.uuid4()),
        "task": args.task,
        "model": args.model,
        "backend": args.backend,
        "execution_mode": "subprocess",
        "timings": {"prepare_conditions_ms": 12.5, "denoise_loop_ms": 840.0, "export_ms": 31.0},
        "memory": {"peak_mb": 3890.0},
        "config_resolved": config,
        "artifacts": [artifact],
        "error": None,
    }
    print(json.dumps({"outputs": [artifact], "metadata": report}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
