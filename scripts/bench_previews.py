#!/usr/bin/env python3
"""How soon a running job's first preview is there after its first chunk, through the real stack.

Starts a throwaway stack (scripts/bench_lib/stack.py: its own Redis, SQLite, local store, the API
under gunicorn, one CPU worker with its models preloaded), makes a --seconds speech clip (the
sample speech looped), runs one warm-up job, then --jobs reference talking-head jobs one after
another. For each it follows ``GET /jobs/<id>/stream`` from before the claim and notes the wall
clock of every ``preview`` event, then reads the RunReport: the worker's wall clock of the first
frames out (``extra.preview.first_frames_at``: the first chunk done and handed to the encoder),
the chunk times, and the previews published. Worker and client share this machine's clock.

  first_preview_ms      first chunk's frames out -> the first ``preview`` event reaches a client
                        (remux, probe, store, the heartbeat's row write, the API's watcher, SSE)
  worker_handover_ms    first frames out -> the worker handed the first preview to its heartbeat
  chunk_ms              one chunk's time (the median of the run's chunks' total_ms)
  goal_met              first_preview_ms_p50 <= chunk_ms_p50 (the issue's goal: within one chunk's
                        time); goal_met_jobs: the jobs that met it, each against its own chunks
  previews, interval_s  previews per job, and the interval they were published at (most)
  event_gap_ms_p50      between successive preview events (the interval, plus the time each takes)

The last line is one JSON object. Usage:
  scripts/bench_previews.py [--jobs 3] [--seconds 30] [--max-size 512] [--interval 3] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_lib.stack import BenchStack  # noqa: E402

MODEL = "reference-talking-head"


def speech_clip(folder: Path, seconds: float) -> Path:
    """The sample speech looped to ``seconds``."""
    out = folder / f"speech-{seconds:g}s.wav"
    cmd = ["ffmpeg", "-v", "error", "-y", "-stream_loop", "-1", "-i", str(ROOT / "samples/speech.wav")]
    subprocess.run([*cmd, "-t", str(seconds), str(out)], check=True)
    return out


def preview_events(
    base: str, job_id: str, seen: list[tuple[float, dict[str, Any]]], done: threading.Event
) -> None:
    """Follow the job's stream until ``end`` (reconnecting), noting each preview event's arrival."""
    last_id = None
    while not done.is_set():
        headers = {"Last-Event-ID": last_id} if last_id else {}
        with requests.get(
            f"{base}/jobs/{job_id}/stream", headers=headers, stream=True, timeout=(10, 120)
        ) as r:
            event: dict[str, str] = {}
            for line in r.iter_lines(chunk_size=None, decode_unicode=True):  # type: ignore[call-overload]
                if line:
                    name, _, value = line.partition(":")
                    event[name] = value.removeprefix(" ")
                    continue
                if event.get("event") == "preview":
                    seen.append((time.time(), json.loads(event["data"])))
                last_id = event.get("id", last_id)
                if event.get("event") == "end":
                    done.set()
                    return
                event = {}


def one_job(stack: BenchStack, speech: Path, max_size: int) -> dict[str, Any]:
    """Run one job while following its stream; its figures."""
    job_id = stack.submit_a2v(
        image=ROOT / "samples/portrait.png", audio=speech, fields={"model": MODEL, "max_size": max_size}
    )
    seen: list[tuple[float, dict[str, Any]]] = []
    done = threading.Event()
    reader = threading.Thread(target=preview_events, args=(stack.base, job_id, seen, done), daemon=True)
    reader.start()
    job = stack.wait(job_id, timeout=600)
    reader.join(timeout=30)
    if job["status"] != "succeeded":
        raise SystemExit(f"job {job_id} {job['status']}: {job.get('error')}")
    report = stack.report(job_id)
    published = report["extra"].get("preview") or {}
    chunks = [c["total_ms"] for c in report.get("chunks", [])]
    first_out = published.get("first_frames_at")
    first_event = seen[0][0] if seen else None
    gaps = [(b[0] - a[0]) * 1000 for a, b in zip(seen, seen[1:], strict=False)]
    return {
        "job": job_id,
        "first_preview_ms": round((first_event - first_out) * 1000, 1) if first_event and first_out else None,
        "worker_handover_ms": published.get("first_delay_ms"),
        "chunk_ms": round(statistics.median(chunks), 1) if chunks else None,
        "first_chunk_ms": round(chunks[0], 1) if chunks else None,
        "chunks": len(chunks),
        "previews": published.get("published"),
        "preview_events": len(seen),
        "event_gap_ms_p50": round(statistics.median(gaps), 1) if gaps else None,
        "build_ms_mean": published.get("build_ms_mean"),
        "first_preview_seconds": seen[0][1]["preview"]["seconds"] if seen else None,
        "generate_ms": report["timings"].get("generate_ms"),
    }


def parse_args() -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0, help="The speech's length.")
    parser.add_argument("--max-size", type=int, default=512, help="The portrait's longest side.")
    parser.add_argument("--interval", type=float, default=3.0, help="JOBSERVICE_PREVIEW_INTERVAL_SECONDS")
    parser.add_argument("--keep", action="store_true", help="Keep the stack's folder.")
    return parser.parse_args()


def main() -> None:
    """Run the jobs and print the figures, the last line as JSON."""
    args = parse_args()
    load_before = os.getloadavg()[0]
    env = {"JOBSERVICE_PREVIEW_INTERVAL_SECONDS": str(args.interval)}
    with BenchStack(keep=args.keep, env=env) as stack:
        speech = speech_clip(stack.tmp, args.seconds)
        one_job(stack, ROOT / "samples/speech.wav" if args.seconds > 8 else speech, args.max_size)  # warm-up
        runs = [one_job(stack, speech, args.max_size) for _ in range(args.jobs)]
    for run in runs:
        print(
            f"{run['job'][:8]}  first preview {run['first_preview_ms']} ms after the first chunk "
            f"(worker {run['worker_handover_ms']} ms; a chunk {run['chunk_ms']} ms), "
            f"{run['previews']} previews, {run['chunks']} chunks"
        )
    firsts = [r["first_preview_ms"] for r in runs if r["first_preview_ms"] is not None]
    chunk = [r["chunk_ms"] for r in runs if r["chunk_ms"] is not None]
    summary = {
        "model": MODEL,
        "jobs": len(runs),
        "seconds": args.seconds,
        "max_size": args.max_size,
        "interval_s": args.interval,
        "first_preview_ms_p50": round(statistics.median(firsts), 1) if firsts else None,
        "first_preview_ms_max": max(firsts) if firsts else None,
        "worker_handover_ms_p50": statistics.median(
            [r["worker_handover_ms"] for r in runs if r["worker_handover_ms"] is not None] or [0]
        ),
        "chunk_ms_p50": round(statistics.median(chunk), 1) if chunk else None,
        "goal_met": bool(firsts and chunk and statistics.median(firsts) <= statistics.median(chunk)),
        "goal_met_jobs": sum(
            1
            for r in runs
            if r["first_preview_ms"] is not None and r["chunk_ms"] and r["first_preview_ms"] <= r["chunk_ms"]
        ),
        "previews_per_job": [r["previews"] for r in runs],
        "event_gap_ms_p50": statistics.median(
            [r["event_gap_ms_p50"] for r in runs if r["event_gap_ms_p50"]] or [0]
        ),
        "build_ms_mean": statistics.median([r["build_ms_mean"] for r in runs if r["build_ms_mean"]] or [0]),
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "runs": runs,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
