#!/usr/bin/env python3
"""Service overhead around warm reference jobs, through the real stack.

Starts its own Redis (unix socket), SQLite and local object store in a temporary folder, the API
under gunicorn and one CPU worker with its models preloaded, then submits jobs one after another
over HTTP (so the queue is empty and submit → claim measures dispatch alone). After one cold
warm-up job per model, it reads each job's row and RunReport and prints a table and, as its LAST
line, one JSON object:

  submit_to_claim_ms_p50/p95  row inserted by the API → claimed by the worker
  submit_request_ms_p50       POST /jobs answered (the client's round trip)
  tail_ms_p50                 last generated frame → job succeeded (encoder flush, gate, upload, DB)
  overhead_ratio_median       (claim → succeeded) / generate time
  qc_x_realtime               media duration / time the gate added after the last frame
  qc_file_x_realtime          media duration / a one-pass file-mode gate over the same output
  stages                      median ms per stage
  duty_cycle, gap_ms_p50      --duty-jobs small jobs (4 s talking heads at 384 px) queued at once for
                              the one worker: sum of generate times / first claim → last finish,
                              and p50 of (next claim − previous finish) (scripts/bench_lib/duty.py)
  same_work_ratio             the FlashHead stand-in (generate_video.py, real flags, a 13 s clip,
                              6.5 s of "compute") through a worker on a fake NPU card, claim →
                              succeeded with the full file gate / the stand-in run alone;
  omnirt_same_work_ratio      `omnirt generate` (0.1.0, cpu-stub, its own venv under var/) of the
                              same stand-in / the stand-in alone (scripts/bench_lib/same_work.py)
  loadavg_1m                  the machine's load at the start and the end (it is shared)

Two job profiles (--profile): "seed" (default) sizes jobs like the users' benchmark documents, a
10 s talking-head clip at 512 px and text2video at the catalog defaults (512x320, 49 frames, 20
steps); "short" uses 4 s clips and smaller text2video jobs, where fixed costs weigh more.

Usage: scripts/bench_overhead.py [--jobs 8] [--profile seed|short] [--duty-jobs 20]
       [--same-work-runs 5] [--no-omnirt] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jobservice.db.engine import Database  # noqa: E402
from jobservice.families.deployment import default_catalog  # noqa: E402
from jobservice.jobs.queries import get_job  # noqa: E402
from scripts.bench_lib.duty import measure_duty, pct  # noqa: E402
from scripts.bench_lib.same_work import SameWorkSite  # noqa: E402
from scripts.bench_lib.stack import BenchStack  # noqa: E402
from workers.validation import Expectation, validate_file  # noqa: E402

# The duty cycle's small job: a 4 s talking head at 384 px (the short profile's audio2video).
DUTY_JOB: dict[str, Any] = {"speech_seconds": 4.0, "max_size": 384}

PROFILES: dict[str, dict[str, Any]] = {
    "seed": {
        "speech_seconds": 10.0,
        "max_size": 512,
        "t2v": {"task": "text2video", "prompt": "waves of amber light over a dark sea"},
    },
    "short": {
        "speech_seconds": 4.0,
        "max_size": 384,
        "t2v": {
            "task": "text2video",
            "prompt": "waves of amber light over a dark sea",
            "width": 384,
            "height": 256,
            "num_frames": 49,
            "fps": 16,
            "num_inference_steps": 12,
        },
    },
}


def submit(base: str, kind: str, speech: Path, portrait: Path, seed: int, profile: dict[str, Any]) -> str:
    if kind == "t2v":
        response = requests.post(f"{base}/jobs", json={**profile["t2v"], "seed": seed}, timeout=60)
    else:
        with portrait.open("rb") as image, speech.open("rb") as audio:
            response = requests.post(
                f"{base}/jobs",
                data={"task": "audio2video", "seed": str(seed), "max_size": str(profile["max_size"])},
                files={"image": image, "audio": audio},
                timeout=60,
            )
    response.raise_for_status()
    return str(response.json()["id"])


def wait(base: str, job_id: str, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = requests.get(f"{base}/jobs/{job_id}", timeout=10).json()
        if job["status"] in {"succeeded", "failed", "canceled"}:
            return job
        time.sleep(0.05)
    raise SystemExit(f"job {job_id} did not finish in {timeout}s")


def measure(db: Database, base: str, store_root: Path, job_id: str) -> dict[str, float]:
    with db.session() as session:
        row = get_job(session, uuid.UUID(job_id))
    assert row is not None and row.claimed_at and row.finished_at
    report = requests.get(f"{base}/jobs/{job_id}/report", timeout=10).json()
    t = report["timings"]
    last_frame = report["last_frame_at"]
    from datetime import datetime

    last = datetime.fromisoformat(last_frame)
    duration = float(report["media_duration_s"])
    qc_ms = t.get("encode_ms", 0.0) + t.get("validate_ms", 0.0)
    video = store_root / f"jobs/{job_id}/output.mp4"
    probe = report["validation"]["probe"]["video"]
    started = time.perf_counter()
    file_gate = validate_file(
        path=video,
        expect=Expectation(
            width=probe["width"], height=probe["height"], fps=probe["fps"], num_frames=probe["nb_frames"]
        ),
        policy=default_catalog().get(row.model).validation,  # type: ignore[union-attr]
    )
    file_gate_ms = (time.perf_counter() - started) * 1000
    assert file_gate.verdict == "passed", file_gate.failed_checks
    return {
        "submit_to_claim_ms": (row.claimed_at - row.created_at).total_seconds() * 1000,
        "tail_ms": (row.finished_at - last).total_seconds() * 1000,
        "claim_to_succeeded_ms": (row.finished_at - row.claimed_at).total_seconds() * 1000,
        "generate_ms": t["generate_ms"],
        "overhead_ratio": (row.finished_at - row.claimed_at).total_seconds() * 1000 / t["generate_ms"],
        "qc_ms": qc_ms,
        "qc_x_realtime": duration * 1000 / qc_ms if qc_ms else float("inf"),
        "qc_file_x_realtime": duration * 1000 / file_gate_ms,
        "decode_cpu_ms": t.get("decode_cpu_ms", float("nan")),
        "media_s": duration,
        **{f"stage_{k}": v for k, v in t.items() if k.endswith("_ms") and isinstance(v, int | float)},
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=8, help="warm jobs per model")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="seed", help="job sizes")
    parser.add_argument("--duty-jobs", type=int, default=20, help="jobs queued at once for the duty cycle")
    parser.add_argument(
        "--same-work-runs", type=int, default=5, help="runs of the FlashHead stand-in (0: skip)"
    )
    parser.add_argument("--no-omnirt", action="store_true", help="skip OmniRT's same-work ratio")
    parser.add_argument(
        "--in-line",
        action="store_true",
        help="the worker finishes each job before taking the next (JOBSERVICE_WORKER_OVERLAP_FINISH=false)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    return parser.parse_args()


def speech_clip(folder: Path, seconds: float) -> Path:
    """The sample speech looped to ``seconds``."""
    out = folder / f"speech-{seconds:g}s.wav"
    source = ROOT / "samples/speech.wav"
    cmd = [
        "ffmpeg",
        "-v",
        "error",
        "-y",
        "-stream_loop",
        "4",
        "-i",
        str(source),
        "-t",
        str(seconds),
        str(out),
    ]
    subprocess.run(cmd, check=True)
    return out


def main() -> None:
    args = parse_args()
    profile = PROFILES[args.profile]
    load_before = round(os.getloadavg()[0], 2)  # a shared machine: say how busy it was
    site = SameWorkSite.create() if args.same_work_runs else None
    stack = BenchStack(
        deployment=site.deployment if site else None,
        keep=args.keep,
        more_workers=[site.worker] if site else [],
        worker_env={"JOBSERVICE_WORKER_OVERLAP_FINISH": "false"} if args.in_line else {},
    )
    extra: dict[str, Any] = {"overlap_finish": not args.in_line}
    speech = speech_clip(stack.tmp, profile["speech_seconds"])
    portrait = ROOT / "samples/portrait.png"
    try:
        stack.start()
        base, db = stack.base, stack.db
        for kind in ("t2v", "a2v"):  # warm-up (cold start excluded from the figures)
            job = wait(base, submit(base, kind, speech, portrait, 0, profile))
            assert job["status"] == "succeeded", job
        rows: dict[str, list[dict[str, float]]] = {"t2v": [], "a2v": []}
        for i in range(args.jobs):
            for kind in ("t2v", "a2v"):
                time.sleep(0.2)  # let the worker go idle so dispatch is measured from an idle state
                started = time.perf_counter()
                job_id = submit(base, kind, speech, portrait, i + 1, profile)
                request_ms = (time.perf_counter() - started) * 1000
                job = wait(base, job_id)
                assert job["status"] == "succeeded", job
                rows[kind].append({**measure(db, base, stack.store_root, job_id), "request_ms": request_ms})
        duty_speech = speech_clip(stack.tmp, DUTY_JOB["speech_seconds"])
        extra["duty"] = measure_duty(
            db,
            submit=lambda i: submit(base, "a2v", duty_speech, portrait, 1000 + i, DUTY_JOB),
            wait=lambda job_id: wait(base, job_id),
            jobs=args.duty_jobs,
        )
        if site is not None:
            extra["same_work"] = site.measure(stack, runs=args.same_work_runs, omnirt=not args.no_omnirt)
    finally:
        stack.close()
        if site is not None and not args.keep:
            site.close()
    print(json.dumps(summarize(args.profile, rows, extra, load_before)))


def summarize(
    profile: str, rows: dict[str, list[dict[str, float]]], extra: dict[str, Any], load_before: float
) -> dict[str, Any]:
    """Print the table; the last-line JSON object of every figure."""
    everything = rows["t2v"] + rows["a2v"]
    print(
        f"{'model':<6} {'claim p50':>10} {'tail p50':>9} {'overhead':>9} {'qc x rt':>8} {'file qc x rt':>12} {'gen ms':>8}"
    )
    for kind, data in rows.items():
        print(
            f"{kind:<6} {pct([d['submit_to_claim_ms'] for d in data], 0.5):>10.2f} {pct([d['tail_ms'] for d in data], 0.5):>9.1f}"
            f" {statistics.median(d['overhead_ratio'] for d in data):>9.3f} {statistics.median(d['qc_x_realtime'] for d in data):>8.1f}"
            f" {statistics.median(d['qc_file_x_realtime'] for d in data):>12.1f} {statistics.median(d['generate_ms'] for d in data):>8.0f}"
        )
    stage_keys = sorted({k for d in everything for k in d if k.startswith("stage_")})
    return {
        "profile": profile,
        "loadavg_1m": [load_before, round(os.getloadavg()[0], 2)],  # at the start and the end
        "jobs": len(everything),
        "submit_to_claim_ms_p50": pct([d["submit_to_claim_ms"] for d in everything], 0.5),
        "submit_to_claim_ms_p95": pct([d["submit_to_claim_ms"] for d in everything], 0.95),
        "submit_request_ms_p50": pct([d["request_ms"] for d in everything], 0.5),
        "tail_ms_p50": pct([d["tail_ms"] for d in everything], 0.5),
        "tail_ms_p95": pct([d["tail_ms"] for d in everything], 0.95),
        "overhead_ratio_median": round(statistics.median(d["overhead_ratio"] for d in everything), 4),
        "qc_x_realtime": round(statistics.median(d["qc_x_realtime"] for d in everything), 1),
        "qc_file_x_realtime": round(statistics.median(d["qc_file_x_realtime"] for d in everything), 1),
        "decode_cpu_ms_median": round(statistics.median(d["decode_cpu_ms"] for d in everything), 1),
        "stages": {
            k.removeprefix("stage_"): round(statistics.median(d[k] for d in everything if k in d), 2)
            for k in stage_keys
        },
        "per_model": {
            kind: {
                "overhead_ratio_median": round(statistics.median(d["overhead_ratio"] for d in data), 4),
                "tail_ms_p50": pct([d["tail_ms"] for d in data], 0.5),
                "generate_ms_median": round(statistics.median(d["generate_ms"] for d in data), 1),
                "media_s": data[0]["media_s"],
            }
            for kind, data in rows.items()
        },
        "overlap_finish": extra.get("overlap_finish", True),
        **extra.get("duty", {}),
        **extra.get("same_work", {}),
    }


if __name__ == "__main__":
    main()
