#!/usr/bin/env python3
"""Polling throughput against OmniRT 0.1.0, side by side on this machine.

Installs OmniRT 0.1.0 (with its server extras) into its own venv under var/bench/omnirt-venv
(once), starts ``omnirt serve --backend cpu-stub`` and submits one job there (``POST /v1/generate``
with ``async_run``), then starts jobservice under ``jobservice up`` in a fresh folder and submits a
long reference text2video job, waiting until it is running with its progress moving. It then runs
the load generator alternately against ``GET /jobs/<id>`` (ours) and ``GET /v1/jobs/<id>``
(OmniRT): ``wrk -t2 -c64 -d10s`` by default, or a small keep-alive load generator in Python when
wrk is not installed (the same one for both sides).

All through the measurement a side poller reads our job on fresh connections (so it meets every
API process) and checks what a client must never see: progress going backwards, or a terminal
status followed by another status.

Usage: .venv/bin/python scripts/bench_poll.py [--rounds 2] [--duration 10] [--connections 64]

The LAST line is one JSON object: ours_rps, omnirt_rps, ratio, ours_p99_ms, omnirt_p99_ms, the
CPU time each server spent per request (ours: gunicorn's master and workers; a figure that does
not depend on what else runs on the machine, unlike req/s), the per-round figures, the machine's
load average, and the correctness checker's findings. On a busy machine req/s favours the server
with more threads (the scheduler shares CPU per thread; OmniRT serves from one), so compare the
CPU figures too.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "var" / "bench"
OMNIRT_VENV = BENCH_DIR / "omnirt-venv"
OMNIRT_REQUIREMENT = "omnirt[server]==0.1.0"
TERMINAL = {"succeeded", "failed", "canceled", "cancelled"}
# A long reference job: minutes of CPU work, its progress moving every few seconds.
LONG_JOB = {
    "task": "text2video",
    "model": "reference-t2v",
    "prompt": "a lighthouse in a storm, waves breaking",
    "num_frames": 241,
    "num_inference_steps": 100,
    "width": 640,
    "height": 352,
}
OMNIRT_JOB = {
    "task": "text2video",
    "model": "wan2.2-t2v-14b",
    "backend": "cpu-stub",
    "inputs": {"prompt": "a lighthouse in a storm"},
    "async_run": True,
}


# ---------------------------------------------------------------- pure helpers (unit-tested)


@dataclass
class LoadResult:
    """One load-generator run against one URL."""

    rps: float
    p99_ms: float
    p50_ms: float
    requests: int
    errors: int  # non-2xx answers plus socket errors


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}[unit]


def parse_wrk(text: str) -> LoadResult:
    """The figures of ``wrk --latency`` output (requests/s, p50/p99 in ms, errors)."""
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if rps is None:
        raise ValueError("no Requests/sec line in wrk output")
    pct = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+(?:us|ms|s|m))\s*$", text, flags=re.M))
    latency: dict[str, float] = {}
    for key, raw in pct.items():
        number = re.match(r"([\d.]+)(us|ms|s|m)", raw)
        assert number is not None
        latency[key] = _ms(number.group(1), number.group(2))
    total = re.search(r"(\d+) requests in", text)
    errors = 0
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    if non2xx:
        errors += int(non2xx.group(1))
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if socket_errors:
        errors += sum(int(n) for n in socket_errors.groups())
    return LoadResult(
        rps=float(rps.group(1)),
        p99_ms=latency.get("99", float("nan")),
        p50_ms=latency.get("50", float("nan")),
        requests=int(total.group(1)) if total else 0,
        errors=errors,
    )


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, nearest-rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100), at least the first
    return ordered[int(min(rank, len(ordered))) - 1]


@dataclass
class PollChecker:
    """What one client may never see while polling one job: progress going backwards, or a
    terminal status followed by a different status."""

    last_progress: float = -1.0
    terminal: str | None = None
    observations: int = 0
    progress_values: set[float] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)

    def observe(self, status: str, progress: float) -> None:
        """Record one answer; a broken promise is appended to ``violations``."""
        self.observations += 1
        self.progress_values.add(progress)
        if self.terminal is not None and status != self.terminal:
            self.violations.append(f"{self.terminal} was followed by {status}")
        if progress < self.last_progress:
            self.violations.append(f"progress went back from {self.last_progress} to {progress}")
        self.last_progress = max(self.last_progress, progress)
        if status in TERMINAL and self.terminal is None:
            self.terminal = status


# ---------------------------------------------------------------- load generation


def run_wrk(url: str, *, threads: int, connections: int, duration: int) -> LoadResult:
    """``wrk -t -c -d --latency`` against ``url``."""
    argv = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", "--latency", url]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=duration + 60)
    return parse_wrk(out.stdout)


def run_python_load(url: str, *, threads: int, connections: int, duration: int) -> LoadResult:
    """The wrk stand-in: ``connections`` keep-alive connections, each a thread issuing GETs."""
    del threads  # one thread per connection; kept for the same signature as run_wrk
    host, port, path = _split(url)
    latencies: list[list[float]] = [[] for _ in range(connections)]
    errors = [0] * connections
    stop_at = time.monotonic() + duration

    def client(i: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=30)
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            try:
                conn.request("GET", path)
                response = conn.getresponse()
                response.read()
                if not 200 <= response.status < 400:
                    errors[i] += 1
            except (OSError, http.client.HTTPException):
                errors[i] += 1
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=30)
                continue
            latencies[i].append((time.perf_counter() - started) * 1000)
        conn.close()

    began = time.monotonic()
    workers = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(connections)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    elapsed = time.monotonic() - began
    every = [ms for per in latencies for ms in per]
    return LoadResult(
        rps=len(every) / elapsed,
        p99_ms=percentile(every, 99),
        p50_ms=percentile(every, 50),
        requests=len(every),
        errors=sum(errors),
    )


def _split(url: str) -> tuple[str, int, str]:
    match = re.match(r"http://([^:/]+):(\d+)(/.*)", url)
    if match is None:
        raise ValueError(f"not an http://host:port/path URL: {url}")
    return match.group(1), int(match.group(2)), match.group(3)


def get_json(url: str, *, timeout: float = 5.0) -> tuple[int, Any]:
    """GET ``url`` on a fresh connection; (status, parsed JSON or None)."""
    host, port, path = _split(url)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    try:
        return response.status, json.loads(body)
    except ValueError:
        return response.status, None


def post_json(url: str, payload: dict[str, Any], *, timeout: float = 30.0) -> tuple[int, Any]:
    """POST ``payload`` as JSON; (status, parsed JSON)."""
    host, port, path = _split(url)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(payload), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


# ---------------------------------------------------------------- the two services


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll ``check`` until it is true, or fail saying ``what`` did not happen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.2)
    raise SystemExit(f"bench_poll: {what} within {timeout:.0f} s")


def ensure_omnirt() -> Path:
    """The omnirt executable of the benchmark's own venv, created and installed on first use."""
    exe = OMNIRT_VENV / "bin" / "omnirt"
    if exe.exists():
        return exe
    print(f"installing {OMNIRT_REQUIREMENT} into {OMNIRT_VENV} ...", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(OMNIRT_VENV)], check=True)
    pip = [str(OMNIRT_VENV / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, OMNIRT_REQUIREMENT], check=True)
    return exe


def start_omnirt(port: int, log_path: Path) -> subprocess.Popen[bytes]:
    """``omnirt serve --backend cpu-stub`` on ``port``."""
    argv = [
        str(ensure_omnirt()),
        "serve",
        "--backend",
        "cpu-stub",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: get_json(base + "/v1/models")[0] == 200, timeout=90, what="omnirt did not start")
    return process


def omnirt_job(port: int) -> str:
    """Submit one job to OmniRT; the URL that polls it."""
    status, body = post_json(f"http://127.0.0.1:{port}/v1/generate", OMNIRT_JOB)
    if status >= 300 or not isinstance(body, dict) or "id" not in body:
        raise SystemExit(f"bench_poll: OmniRT refused the job ({status}): {body}")
    url = f"http://127.0.0.1:{port}/v1/jobs/{body['id']}"
    wait_until(lambda: get_json(url)[0] == 200, timeout=30, what="OmniRT's job did not answer")
    return url


def start_ours(port: int, var_dir: Path) -> subprocess.Popen[bytes]:
    """``jobservice up`` in its own folder (embedded Redis, SQLite, one CPU worker)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
    env["JOBSERVICE_AUTH"] = "off"
    # Settings the operator set for this run (e.g. JOBSERVICE_API_THREADS) are passed through.
    env.update({k: v for k, v in os.environ.items() if k.startswith("JOBSERVICE_API_")})
    argv = [
        str(Path(sys.executable).parent / "jobservice"),
        "up",
        "--port",
        str(port),
        "--var-dir",
        str(var_dir),
    ]
    log = (var_dir / "up.log").open("wb")
    process = subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: get_json(base + "/healthz")[0] == 200, timeout=120, what="jobservice up did not start")
    return process


def our_running_job(port: int) -> str:
    """Submit the long job and wait until it runs with its progress moving; the URL polling it."""
    base = f"http://127.0.0.1:{port}"
    status, body = post_json(base + "/jobs", LONG_JOB)
    if status != 202:
        raise SystemExit(f"bench_poll: jobservice refused the job ({status}): {body}")
    url = f"{base}/jobs/{body['id']}"
    first: list[float] = []

    def moving() -> bool:
        _, job = get_json(url)
        if job["status"] in TERMINAL:
            raise SystemExit(f"bench_poll: the long job ended early: {job['status']} {job.get('error')}")
        if job["status"] != "running" or job["progress"] <= 0:
            return False
        first.append(job["progress"])
        return first[-1] > first[0]

    wait_until(moving, timeout=180, what="our long job did not start making progress")
    return url


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """Stop a child we started (its whole session), waiting for it."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, sig)
        process.wait(timeout=40)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    except ProcessLookupError:
        pass


def cpu_seconds(pid: int) -> float:
    """CPU time used so far by ``pid`` and its descendants (user + system)."""
    import psutil  # the project's dependency; imported here so the pure helpers need nothing

    total = 0.0
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def api_pid(up_pid: int) -> int:
    """The gunicorn master that ``jobservice up`` (``up_pid``) started for the API."""
    import psutil

    for proc in psutil.Process(up_pid).children():
        if "api" in proc.cmdline():
            return int(proc.pid)
    raise SystemExit("bench_poll: jobservice up runs no API process")


# ---------------------------------------------------------------- the run


class SidePoller(threading.Thread):
    """Polls our job on fresh connections every ``every`` seconds and feeds a PollChecker."""

    def __init__(self, url: str, every: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.every = every
        self.checker = PollChecker()
        self.failures = 0
        self.halt = threading.Event()

    def run(self) -> None:
        """Poll until halted."""
        while not self.halt.is_set():
            try:
                status, job = get_json(self.url, timeout=10)
                if status == 200 and isinstance(job, dict):
                    self.checker.observe(job["status"], float(job["progress"]))
                else:
                    self.failures += 1
            except (OSError, http.client.HTTPException):
                self.failures += 1
            self.halt.wait(self.every)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Start both services, alternate the load between them, and return the figures."""
    load = run_wrk if shutil.which("wrk") and not args.python_load else run_python_load
    run_dir = BENCH_DIR / f"poll-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    omni_port, our_port = free_port(), free_port()
    omni = start_omnirt(omni_port, run_dir / "omnirt.log")
    ours = None
    try:
        omni_url = omnirt_job(omni_port)
        ours = start_ours(our_port, run_dir)
        our_url = our_running_job(our_port)
        poller = SidePoller(our_url)
        poller.start()
        rounds: list[dict[str, Any]] = []
        load_avg = os.getloadavg()
        pids = {"ours": api_pid(ours.pid), "omnirt": omni.pid}
        for i in range(args.rounds):
            for side, url in (("ours", our_url), ("omnirt", omni_url)):
                before = get_json(our_url)[1]["progress"]
                cpu = cpu_seconds(pids[side])
                result = load(url, threads=args.threads, connections=args.connections, duration=args.duration)
                # CPU per request does not depend on what else runs on the machine; req/s does.
                cpu_us = (cpu_seconds(pids[side]) - cpu) / max(result.requests, 1) * 1e6
                after = get_json(our_url)[1]["progress"]
                rounds.append(
                    {
                        "round": i,
                        "side": side,
                        **result.__dict__,
                        "cpu_us_per_req": cpu_us,
                        "progress": [before, after],
                    }
                )
                print(
                    f"round {i} {side:6s} {result.rps:8.0f} req/s  p50 {result.p50_ms:6.1f} ms  "
                    f"p99 {result.p99_ms:6.1f} ms  cpu/req {cpu_us:5.0f} us  errors {result.errors}  "
                    f"our progress {before}->{after}",
                    file=sys.stderr,
                )
        load_max = tuple(round(max(a, b), 2) for a, b in zip(load_avg, os.getloadavg(), strict=True))
        poller.halt.set()
        poller.join(timeout=15)
        _, final = get_json(our_url)
    finally:
        if ours is not None:
            stop(ours, signal.SIGINT)  # `jobservice up` stops its children on Ctrl-C
        stop(omni)
    return summarize(rounds, poller, final, load_max, "wrk" if load is run_wrk else "python")


def summarize(
    rounds: list[dict[str, Any]],
    poller: SidePoller,
    final: dict[str, Any],
    load_avg: tuple[float, ...],
    generator: str,
) -> dict[str, Any]:
    """The JSON summary of the rounds."""

    def side(name: str, key: str) -> float:
        return statistics.mean(r[key] for r in rounds if r["side"] == name)

    ours_rps, omnirt_rps = side("ours", "rps"), side("omnirt", "rps")
    ours_p99, omnirt_p99 = side("ours", "p99_ms"), side("omnirt", "p99_ms")
    moved = all(r["progress"][1] > r["progress"][0] for r in rounds if r["side"] == "ours")
    checker = poller.checker
    return {
        "ours_rps": round(ours_rps, 1),
        "omnirt_rps": round(omnirt_rps, 1),
        "ratio": round(ours_rps / omnirt_rps, 3) if omnirt_rps else None,
        "ours_p99_ms": round(ours_p99, 1),
        "omnirt_p99_ms": round(omnirt_p99, 1),
        "ours_errors": sum(r["errors"] for r in rounds if r["side"] == "ours"),
        "ours_cpu_us_per_req": round(side("ours", "cpu_us_per_req")),
        "omnirt_cpu_us_per_req": round(side("omnirt", "cpu_us_per_req")),
        "goal_met": ours_rps >= 2 * omnirt_rps and ours_p99 <= 50,
        "progress_moved_during_each_round": moved,
        "job_status_at_end": final.get("status"),
        "poll_observations": checker.observations,
        "poll_distinct_progress": len(checker.progress_values),
        "poll_violations": checker.violations[:10],
        "poll_failures": poller.failures,
        "load_generator": generator,
        "load_avg_max": list(load_avg),
        "rounds": [{k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()} for r in rounds],
    }


def main() -> None:
    """Run the benchmark and print its JSON as the last line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="Alternations ours/OmniRT (default 2).")
    parser.add_argument("--duration", type=int, default=10, help="Seconds per load run (default 10).")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--python-load", action="store_true", help="Use the Python load generator.")
    summary = measure(parser.parse_args())
    print(
        f"ours {summary['ours_rps']:.0f} req/s (p99 {summary['ours_p99_ms']} ms), OmniRT "
        f"{summary['omnirt_rps']:.0f} req/s (p99 {summary['omnirt_p99_ms']} ms): ratio {summary['ratio']}",
        file=sys.stderr,
    )
    print(json.dumps(summary))
    sys.exit(0 if not summary["poll_violations"] else 1)


if __name__ == "__main__":
    main()
