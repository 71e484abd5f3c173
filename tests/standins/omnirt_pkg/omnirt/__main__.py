"""Stand-in for ``python -m omnirt generate``, only for what the real omnirt 0.1.0 (driven in
tests/integration/test_omnirt_real.py) cannot be made to do on a machine without cards: its
memory budget refusing a run (``InsufficientMemoryError``, exit 2), an artifact reported outside
the requested ``output_dir``, an inline (base64) artifact.

It honours the real contract where it overlaps: ``--config FILE`` is a whole request read as
``GenerateRequest.from_dict`` does (a file without ``task`` or ``model`` ends in a ``KeyError``
traceback and exit 1, and ``--task``/``--model``/input flags are then ignored); one JSON line on
stdout with ``--json``. Records the request it read. Modes from $STANDIN_MODE_FILE: ok, budget,
outside, inline.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import traceback
import uuid
from pathlib import Path
from typing import Any

from tests.standins.common import audio_seconds, make_video, mode, mux_shortest, record


def read_request(args: argparse.Namespace) -> dict[str, Any]:
    """What ``request_from_args`` builds; only the ``--config`` path is stood in for."""
    if not args.config:
        raise SystemExit("omnirt stand-in: only --config FILE requests are stood in for")
    payload = json.loads(Path(args.config).read_text())
    # GenerateRequest.from_dict: payload["task"], payload["model"] (KeyError when missing).
    return {
        "task": payload["task"],
        "model": payload["model"],
        "backend": payload.get("backend", "auto"),
        "inputs": dict(payload.get("inputs", {})),
        "config": dict(payload.get("config", {})),
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="omnirt")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate")
    for flag in ("--config", "--task", "--model", "--backend", "--image", "--audio", "--output-dir"):
        gen.add_argument(flag)
    gen.add_argument("--json", action="store_true")
    args = parser.parse_args()
    act = mode()
    try:
        request = read_request(args)
    except KeyError:
        record("omnirt", mode=act, request=None)
        traceback.print_exc()  # what the real CLI does: the KeyError is not caught, exit 1
        return 1
    record("omnirt", mode=act, request=request)
    if act == "budget":
        print(
            "error: InsufficientMemoryError: soulx-flashhead-1.3b needs 48.0 GB, 12.5 GB available",
            file=sys.stderr,
        )
        return 2
    return write_result(request, act)


def write_result(request: dict[str, Any], act: str) -> int:
    """A video of the audio's length in ``output_dir`` (or elsewhere, for ``outside``)."""
    inputs, config = request["inputs"], request["config"]
    out_dir = Path(config.get("output_dir", "outputs"))
    if act == "outside":
        out_dir = out_dir.parent.parent / "elsewhere"
    out_dir.mkdir(parents=True, exist_ok=True)
    fps, size = 25, 512
    frames = round(audio_seconds(inputs["audio"]) * fps)
    path = out_dir / f"{request['model']}-{uuid.uuid4().hex[:6]}.mp4"
    silent = out_dir / "video-only.mp4"
    make_video(silent, width=size, height=size, fps=fps, frames=frames)
    mux_shortest(silent, inputs["audio"], path)
    artifact: dict[str, Any] = {
        "kind": "video",
        "path": str(path),
        "mime": "video/mp4",
        "width": size,
        "height": size,
        "num_frames": frames,
        "transport": "path",
        "data_b64": None,
    }
    if act == "inline":
        artifact.update(transport="inline_bytes", data_b64=base64.b64encode(path.read_bytes()).decode())
    report = {
        "run_id": str(uuid.uuid4()),
        "task": request["task"],
        "model": request["model"],
        "backend": request["backend"],
        "execution_mode": "persistent_worker",
        "timings": {"prepare_conditions_ms": 0.2, "denoise_loop_ms": 840.0, "export_ms": 31.0},
        "memory": {"peak_mb": 3890.0},
        "config_resolved": config,
        "artifacts": [artifact],
        "error": None,
    }
    print(json.dumps({"outputs": [artifact], "metadata": report}, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
