"""Absolute figures on one device through a real worker: the reference models and the diffusers
back end (a tiny random Wan2.1 pipeline built locally, as tests/integration/test_diffusers_e2e.py
does: no downloads), each run twice: cold (the model loads in the job) and warm.

Prints, as its LAST line, one JSON object: per model and run, generate_ms, render_fps, rtf,
peak_mb (torch's max_memory_allocated on cuda/npu; peak_rss_mb always), load_ms, cold_start; and
the device, torch and CUDA versions, and the total wall time. Run by scripts/verify_device.sh.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scripts.bench_lib.stack import BenchStack  # noqa: E402
from tests.standins.deploy import write_deployment  # noqa: E402

WAN = "wan2.1-t2v-1.3b"
JOBS: dict[str, dict[str, Any]] = {
    "reference-t2v": {"task": "text2video", "prompt": "waves of amber light over a dark sea", "seed": 1},
    "reference-talking-head": {"task": "audio2video", "max_size": 384, "seed": 1},
    WAN: {
        "prompt": "a red kite over the sea",
        "width": 64,
        "height": 48,
        "num_frames": 17,
        "fps": 8,
        "seed": 3,
    },
}


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda:0", help="card group of the worker (cuda:0, npu:0, cpu)")
    parser.add_argument("--runs", type=int, default=2, help="runs per model: the first is cold")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    return parser.parse_args()


def build_site(folder: Path) -> Path:
    """The tiny Wan pipeline and a deployment serving it beside the reference models."""
    wan = folder / "Wan2.1-T2V-tiny-Diffusers"
    subprocess.run([sys.executable, "-m", "tests.standins.tiny_wan", str(wan)], cwd=ROOT, check=True)
    entry = {
        "backend": "diffusers",
        "path": str(wan),
        "defaults": {"num_inference_steps": 4, "guidance_scale": 5.0},
    }
    return write_deployment(folder / "deploy.yaml", {"reference_models": True, "models": {WAN: entry}})


def speech(folder: Path, seconds: float = 4.0) -> Path:
    """The sample speech cut to ``seconds``."""
    out = folder / "speech.wav"
    source = ROOT / "samples/speech.wav"
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-i", str(source), "-t", f"{seconds:g}", str(out)], check=True
    )
    return out


def run_one(stack: BenchStack, model: str, audio: Path) -> dict[str, Any]:
    """One job of ``model``; the figures of its RunReport."""
    body = {**JOBS[model], "model": model}
    if body.get("task") == "audio2video":
        fields = {k: v for k, v in body.items()}
        job_id = stack.submit_a2v(image=ROOT / "samples/portrait.png", audio=audio, fields=fields)
    else:
        job_id = stack.submit_json(body)
    job = stack.wait(job_id, timeout=240)
    assert job["status"] == "succeeded", job
    report = stack.report(job_id)
    timings = report["timings"]
    return {
        "cold_start": report["cold_start"],
        "load_ms": timings.get("load_ms"),
        "generate_ms": timings["generate_ms"],
        "total_ms": timings["total_ms"],
        "render_fps": report["render_fps"],
        "rtf": report["rtf"],
        "frames": report["frames_generated"],
        "verdict": report["validation"]["verdict"],
        **{k: v for k, v in report["memory"].items()},
    }


def main() -> None:
    args = parse()
    started = time.perf_counter()
    stack = BenchStack(devices=args.device, preload=False, keep=args.keep, worker_env={"HF_HUB_OFFLINE": "1"})
    stack.deployment = build_site(stack.tmp)
    audio = speech(stack.tmp)
    figures: dict[str, list[dict[str, Any]]] = {}
    try:
        stack.start()
        for model in JOBS:
            figures[model] = [run_one(stack, model, audio) for _ in range(args.runs)]
            print(model, json.dumps(figures[model]), flush=True)
    finally:
        stack.close()
    result: dict[str, Any] = {"device": args.device, **versions(args.device)}
    for model, runs in figures.items():
        result[model] = {
            ("cold" if i == 0 else f"warm{i}" if i > 1 else "warm"): run for i, run in enumerate(runs)
        }
    result["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result))


def versions(device: str) -> dict[str, Any]:
    """torch's version and, on cuda, the card's name and CUDA version (asked in a child process)."""
    code = (
        "import json, torch; d = {'torch': torch.__version__}\n"
        "if torch.cuda.is_available():\n"
        "    d.update(cuda=torch.version.cuda, card=torch.cuda.get_device_name(0))\n"
        "print(json.dumps(d))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 else {"torch": None}


if __name__ == "__main__":
    main()
