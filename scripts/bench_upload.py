#!/usr/bin/env python3
"""What uploads cost the API: resident memory per large upload, and throughput of many at once.

Starts its own Redis (unix socket), a SQLite database and the API under gunicorn
(``jobservice api``, the way ``jobservice up`` runs it) in a fresh folder under var/bench/, with the
upload caps raised so that a 500 MB audio file is a valid submission (JOBSERVICE_MAX_REQUEST_MB=600,
JOBSERVICE_MAX_AUDIO_MB=512; the defaults, 256 and 100, would refuse it by its length before a
byte is read). Bodies are generated while they are sent (a WAV header and noise), so nothing large
is written by the client. It measures, summing the resident memory of gunicorn's master and
workers every 20 ms (peak during the request minus the figure just before):

  rss_delta_mb_500mb      a 500 MB audio2video submission that is accepted (202)
                          (every rss_ figure: gunicorn's master + workers, peak minus before; the
                          ffprobe/ffmpeg processes that check the audio are reported apart)
  rss_delta_mb_refused    a 500 MB one refused after it was read (noise, not audio: 422)
  rss_delta_mb_too_large  a 700 MB one sent without a length, cut off at the cap (413)
  concurrent_mb_s         20 concurrent 20 MB submissions: bytes sent / wall time, all accepted

Usage: .venv/bin/python scripts/bench_upload.py [--big-mb 500] [--parallel 20] [--each-mb 20] [--keep]

Goals (issue 12): at most +64 MB for the 500 MB upload, accepted or refused; at least 200 MB/s.
The LAST line is one JSON object.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jobservice.cli.embedded import Child, start_redis  # noqa: E402
from jobservice.db import migrate  # noqa: E402

MB = 2**20
CHUNK = 256 * 1024
RATE, CHANNELS, SAMPLE_BYTES = 192_000, 6, 2  # 2.3 MB/s of PCM: 500 MB is 227 s (< 300 s allowed)


def wav_header(data_bytes: int) -> bytes:
    """A 44-byte PCM WAV header for ``data_bytes`` of samples."""
    block = CHANNELS * SAMPLE_BYTES
    return (
        b"RIFF"
        + struct.pack("<I", 36 + data_bytes)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, CHANNELS, RATE, RATE * block, block, SAMPLE_BYTES * 8)
        + b"data"
        + struct.pack("<I", data_bytes)
    )


def noise(size: int) -> Iterator[bytes]:
    """``size`` bytes of (repeating) noise in CHUNK pieces."""
    block = os.urandom(CHUNK)
    left = size
    while left > 0:
        piece = block[: min(left, CHUNK)]
        left -= len(piece)
        yield piece


class Multipart:
    """A multipart/form-data body streamed from generators, with its exact length."""

    def __init__(
        self, fields: dict[str, str], files: list[tuple[str, str, str, int, Iterator[bytes]]]
    ) -> None:
        self.boundary = uuid.uuid4().hex
        self.parts: list[tuple[bytes, int, Iterator[bytes] | None]] = []
        for name, value in fields.items():
            head = f'--{self.boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
            self.parts.append((head.encode(), 0, None))
        for name, filename, mime, size, body in files:
            head = (
                f'--{self.boundary}\r\nContent-Disposition: form-data; name="{name}"; '
                f'filename="{filename}"\r\nContent-Type: {mime}\r\n\r\n'
            )
            self.parts.append((head.encode(), size, body))
        self.tail = f"\r\n--{self.boundary}--\r\n".encode()

    @property
    def content_type(self) -> str:
        """The Content-Type header value."""
        return f"multipart/form-data; boundary={self.boundary}"

    def length(self) -> int:
        """The body's exact length in bytes."""
        files = sum(size + 2 for _, size, body in self.parts if body is not None)  # CRLF after each
        return sum(len(head) for head, _, _ in self.parts) + files - 2 + len(self.tail)

    def chunks(self) -> Iterator[bytes]:
        """The body, piece by piece."""
        first_file = True
        for head, _, body in self.parts:
            if body is not None and not first_file:
                yield b"\r\n"
            yield head
            if body is not None:
                first_file = False
                yield from body
        yield self.tail


def submission(portrait: bytes, audio_bytes: int, *, valid: bool = True) -> Multipart:
    """An audio2video submission: the portrait and ``audio_bytes`` of WAV (or of noise)."""
    pcm = audio_bytes - 44
    audio = (
        _chain([wav_header(pcm)], noise(pcm)) if valid else noise(audio_bytes)
    )  # invalid: noise without a header is no audio format
    return Multipart(
        {"task": "audio2video", "model": "reference-talking-head"},
        [
            ("image", "portrait.png", "image/png", len(portrait), iter([portrait])),
            ("audio", "speech.wav", "audio/wav", audio_bytes, audio),
        ],
    )


def _chain(*parts: Any) -> Iterator[bytes]:
    for part in parts:
        yield from part


def post(port: int, body: Multipart, *, chunked: bool = False) -> tuple[int, str]:
    """Send ``body`` to POST /jobs; (status, error code or job status). A refusal mid-body counts."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    headers = {"Content-Type": body.content_type}
    try:
        if chunked:
            conn.putrequest("POST", "/jobs")
            for key, value in {**headers, "Transfer-Encoding": "chunked"}.items():
                conn.putheader(key, value)
            conn.endheaders()
            for piece in body.chunks():
                conn.send(b"%X\r\n%s\r\n" % (len(piece), piece))
            conn.send(b"0\r\n\r\n")
        else:
            conn.request(
                "POST", "/jobs", body=body.chunks(), headers={**headers, "Content-Length": str(body.length())}
            )
        response = conn.getresponse()
        data = json.loads(response.read() or b"{}")
        code = (data.get("error") or {}).get("code") or data.get("status", "")
        return response.status, code
    except (BrokenPipeError, ConnectionResetError):
        try:  # the server answered and closed before the body was all sent
            response = conn.getresponse()
            return response.status, "closed-early"
        except (OSError, http.client.HTTPException):
            return 0, "connection-reset"
    finally:
        conn.close()


class RssSampler(threading.Thread):
    """Samples, every ``every`` seconds, the summed RSS of gunicorn's master and workers (the API
    processes) and, apart, the largest RSS of a tool they run (ffprobe, ffmpeg: short-lived
    processes of their own, which a worker's memory does not include)."""

    def __init__(self, pid: int, every: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.every = every
        self.peak = 0
        self.tool_peak = 0
        self.halt = threading.Event()

    def rss(self) -> int:
        """The summed RSS of the master and its workers now, in bytes."""
        root = psutil.Process(self.pid)
        total = 0
        for proc in [root, *root.children()]:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                pass
        return total

    def tools(self) -> int:
        """The largest RSS of a process the workers started, in bytes."""
        largest = 0
        for worker in psutil.Process(self.pid).children():
            try:
                for tool in worker.children(recursive=True):
                    largest = max(largest, tool.memory_info().rss)
            except psutil.Error:
                pass
        return largest

    def run(self) -> None:
        """Sample until halted."""
        while not self.halt.is_set():
            self.peak = max(self.peak, self.rss())
            self.tool_peak = max(self.tool_peak, self.tools())
            self.halt.wait(self.every)


def measured(pid: int, send: Any) -> dict[str, Any]:
    """Run ``send()``: its answer, the API's peak and final RSS change, the largest tool's RSS (MB)."""
    sampler = RssSampler(pid)
    before = sampler.rss()
    sampler.peak = before
    sampler.start()
    result = send()
    time.sleep(0.3)  # let the process settle (spool deleted, buffers freed)
    sampler.halt.set()
    sampler.join()
    after = sampler.rss()
    return {
        "answer": result,
        "peak_delta_mb": round((sampler.peak - before) / MB, 1),
        "after_delta_mb": round((after - before) / MB, 1),
        "tool_peak_mb": round(sampler.tool_peak / MB, 1),
    }


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_api(
    run_dir: Path, extra: dict[str, str] | None = None, name: str = "bench_upload"
) -> tuple[Child, Child, int]:
    """Redis, a migrated SQLite database and ``jobservice api`` (``extra``: more or other settings,
    as environment variables); (redis, api, port)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
    redis_child, broker = start_redis(run_dir, env)
    database = f"sqlite:///{run_dir / 'jobservice.db'}"
    migrate.upgrade(database)
    port = free_port()
    env.update(
        {
            "JOBSERVICE_VAR_DIR": str(run_dir),
            "JOBSERVICE_DATABASE_URL": database,
            "JOBSERVICE_BROKER_URL": broker,
            "JOBSERVICE_AUTH": "off",
            "JOBSERVICE_MAX_REQUEST_MB": "600",
            "JOBSERVICE_MAX_AUDIO_MB": "512",
            "JOBSERVICE_MIN_FREE_MB": "0",
            **(extra or {}),
        }
    )
    exe = str(Path(sys.executable).parent / "jobservice")
    api = Child("api", [exe, "api", "--port", str(port)], env, run_dir / "api.log")
    api.start()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return redis_child, api, port
        except OSError:
            time.sleep(0.2)
    api.stop()
    redis_child.stop()
    raise SystemExit(f"{name}: the API did not start; see " + str(run_dir / "api.log"))


def cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` and its live children, with the children they already reaped (ffmpeg)."""
    total = 0.0
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def concurrent(port: int, pid: int, portrait: bytes, *, parallel: int, each_mb: int) -> dict[str, Any]:
    """``parallel`` submissions of ``each_mb`` at once: aggregate MB/s, statuses, CPU per MB."""
    bodies = [submission(portrait, each_mb * MB) for _ in range(parallel)]
    total = sum(b.length() for b in bodies) / MB
    cpu_before, client_before = cpu_seconds(pid), time.process_time()
    started = time.monotonic()
    with ThreadPoolExecutor(parallel) as pool:
        statuses = [status for status, _ in pool.map(lambda b: post(port, b), bodies)]
    wall = time.monotonic() - started
    api_cpu, client_cpu = cpu_seconds(pid) - cpu_before, time.process_time() - client_before
    return {
        "mb_s": total / wall,
        "statuses": statuses,
        # Load-independent: what the API (with its ffmpeg children) and this client spent per MB.
        "api_cpu_ms_per_mb": 1000 * api_cpu / total,
        "client_cpu_ms_per_mb": 1000 * client_cpu / total,
    }


def main() -> None:
    """Run the measurements and print the JSON line last."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big-mb", type=int, default=500)
    parser.add_argument("--parallel", type=int, default=20)
    parser.add_argument("--each-mb", type=int, default=20)
    parser.add_argument("--keep", action="store_true", help="Keep the run's folder (its ~1 GB of objects).")
    args = parser.parse_args()
    run_dir = ROOT / "var" / "bench" / f"upload-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    portrait = (ROOT / "samples" / "portrait.png").read_bytes()
    redis_child, api, port = start_api(run_dir)
    assert api.process is not None
    pid = api.process.pid
    try:
        warm = post(port, submission(portrait, 2 * MB))  # the first upload imports PIL, probes...
        assert warm[0] == 202, warm
        big = args.big_mb * MB
        accepted = measured(pid, lambda: post(port, submission(portrait, big)))
        refused = measured(pid, lambda: post(port, submission(portrait, big, valid=False)))
        too_large = measured(pid, lambda: post(port, submission(portrait, 700 * MB), chunked=True))
        load_before = os.getloadavg()
        many = concurrent(port, pid, portrait, parallel=args.parallel, each_mb=args.each_mb)
        mb_s, statuses = many["mb_s"], many["statuses"]
        load_after = os.getloadavg()
    finally:
        api.stop(signal.SIGTERM)
        redis_child.stop()
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    summary = {
        "rss_delta_mb_500mb": accepted["peak_delta_mb"],
        "rss_delta_mb_refused": refused["peak_delta_mb"],
        "rss_delta_mb_too_large": too_large["peak_delta_mb"],
        "uploads": {"500mb": accepted, "refused": refused, "too_large": too_large},
        "concurrent_mb_s": round(mb_s, 1),
        "concurrent_statuses": sorted(set(statuses)),
        "api_cpu_ms_per_mb": round(many["api_cpu_ms_per_mb"], 2),
        "client_cpu_ms_per_mb": round(many["client_cpu_ms_per_mb"], 2),
        "big_mb": args.big_mb,
        "load_avg": [round(max(a, b), 2) for a, b in zip(load_before, load_after, strict=True)],
    }
    worst = max(accepted["peak_delta_mb"], refused["peak_delta_mb"], too_large["peak_delta_mb"])
    summary["goal_met"] = worst <= 64 and mb_s >= 200
    print(
        f"{args.big_mb} MB accepted {accepted['answer']}: +{accepted['peak_delta_mb']} MB; refused "
        f"{refused['answer']}: +{refused['peak_delta_mb']} MB; too large {too_large['answer']}: "
        f"+{too_large['peak_delta_mb']} MB; {args.parallel} x {args.each_mb} MB at once: {mb_s:.0f} MB/s",
        file=sys.stderr,
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
