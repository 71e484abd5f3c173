#!/usr/bin/env python3
"""Service overhead around warm reference jobs, through the real stack.

Starts its own Redis (unix socket), SQLite and local object store in a temporary folder, the API
under gunicorn and one CPU worker with its models preloaded, then submits jobs one after another
over HTTP (so the queue is empty and submit → claim measures dispatch alone). After one cold
warm-up job per model, it reads each job's row and RunReport and prints a table and, as its LAST
line, one JSON object:

  submit_to_claim_ms_p50/p95  row inserted by the API → claimed by the worker
  tail_ms_p50                 last generated frame → job succeeded (encoder flush, gate, upload, DB)
  overhead_ratio_median       (claim → succeeded) / generate time
  qc_x_realtime               media duration / time the gate added after the last frame
  qc_file_x_realtime          media duration / a one-pass file-mode gate over the same output
  stages                      median ms per stage

Two job profiles (--profile): "seed" (default) sizes jobs like the users' benchmark documents, a
10 s talking-head clip at 512 px and text2video at the catalog defaults (512x320, 49 frames, 20
steps); "short" uses 4 s clips and smaller text2video jobs, where fixed costs weigh more.

Usage: scripts/bench_overhead.py [--jobs 8] [--profile seed|short] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jobservice.backends.deployment import default_catalog  # noqa: E402
from jobservice.cli.embedded import Child, start_redis, wait_http  # noqa: E402
from jobservice.db.engine import Database  # noqa: E402
from jobservice.db.migrate import upgrade  # noqa: E402
from jobservice.jobs.queries import get_job  # noqa: E402
from workers.validation import Expectation, validate_file  # noqa: E402

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


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return round(ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo), 3)


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
            return job  # type: ignore[no-any-return]
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=8, help="warm jobs per model")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="seed", help="job sizes")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    profile = PROFILES[args.profile]

    tmp = Path(tempfile.mkdtemp(prefix="jobservice-bench-"))
    var = tmp / "var"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
    redis_child, broker = start_redis(var, env)
    db_url = f"sqlite:///{var / 'jobservice.db'}"
    upgrade(db_url)
    env.update(
        {
            "JOBSERVICE_VAR_DIR": str(var),
            "JOBSERVICE_DATABASE_URL": db_url,
            "JOBSERVICE_BROKER_URL": broker,
            "JOBSERVICE_LOG_LEVEL": "WARNING",
            "JOBSERVICE_AUTH": "off",  # loopback only, as under `jobservice up`
            "PYTHONUNBUFFERED": "1",
        }
    )
    port = 18000 + os.getpid() % 1000
    me = [sys.executable, "-m", "jobservice.cli.main"]
    worker = Child(
        "worker",
        [*me, "worker", "--devices", "cpu", "--preload", "--loglevel", "WARNING"],
        env,
        var / "worker.log",
    )
    api = Child(
        "api", [*me, "api", "--port", str(port), "--workers", "1", "--threads", "4"], env, var / "api.log"
    )
    children = [redis_child, worker, api]
    base = f"http://127.0.0.1:{port}"
    speech = tmp / "speech.wav"
    subprocess.run(
        [
            "ffmpeg",
            "-v",
            "error",
            "-y",
            "-stream_loop",
            "2",
            "-i",
            str(ROOT / "samples/speech.wav"),
            "-t",
            str(profile["speech_seconds"]),
            str(speech),
        ],
        check=True,
    )
    portrait = ROOT / "samples/portrait.png"
    try:
        worker.start()
        api.start()
        wait_http(f"{base}/healthz", api)
        db = Database(db_url)
        for kind in ("t2v", "a2v"):  # warm-up (cold start excluded from the figures)
            job = wait(base, submit(base, kind, speech, portrait, 0, profile))
            assert job["status"] == "succeeded", job
        rows: dict[str, list[dict[str, float]]] = {"t2v": [], "a2v": []}
        for i in range(args.jobs):
            for kind in ("t2v", "a2v"):
                time.sleep(0.2)  # let the worker go idle so dispatch is measured from an idle state
                job = wait(base, submit(base, kind, speech, portrait, i + 1, profile))
                assert job["status"] == "succeeded", job
                rows[kind].append(measure(db, base, var / "objects", job["id"]))
    finally:
        for child in reversed(children):
            child.stop(signal.SIGTERM, grace=10)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

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
    result = {
        "profile": args.profile,
        "jobs": len(everything),
        "submit_to_claim_ms_p50": pct([d["submit_to_claim_ms"] for d in everything], 0.5),
        "submit_to_claim_ms_p95": pct([d["submit_to_claim_ms"] for d in everything], 0.95),
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
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
