#!/usr/bin/env python3
"""Direct uploads (issue 26): what a large upload costs the API when the store is S3.

Starts moto's S3 server (a process of its own), a Redis, a SQLite database and the API under
gunicorn (``jobservice api``, as ``jobservice up`` runs it, with one worker process) on the S3 store, in a fresh folder
under var/bench/, the caps raised so that the file is a valid speech upload (a PCM WAV: its header,
then noise, generated part by part while it is sent; nothing large is written by the client). Then:

  direct     POST /uploads, PUT every part to its presigned URL (straight to moto), POST complete
  direct_6mb the same for a 6 MB file in two parts (what does not grow with the size)
  form       the same bytes as a plain multipart POST /jobs through the API (skip with --no-form)

A 6 MB direct upload in two parts goes first, unmeasured (the first S3 calls' imports and clients). For each
it reports the API processes' (gunicorn master + workers) peak RSS above what they held
before, and the bytes they received: the sum of ``rchar`` in /proc/<pid>/io (every byte read from a
socket or a file, the request bodies included) and, apart, the ``Content-Length`` the client sent
to the API. Goal: a 2 GB direct upload moves zero bytes through the API process.

Usage: .venv/bin/python scripts/bench_direct_uploads.py [--size 2G] [--no-form] [--keep]
The LAST line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_upload as form_bench  # noqa: E402  (its WAV header, multipart body, RSS sampler)

from jobservice.cli.embedded import Child  # noqa: E402

MB = 2**20
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


class CountingProxy(threading.Thread):
    """A TCP proxy to ``127.0.0.1:upstream`` that counts the bytes it passes each way: in front of
    the API (what clients send it) and between the API and S3 (what it reads from and writes to S3)."""

    def __init__(self, upstream: int) -> None:
        super().__init__(daemon=True)
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.counts = {"to_upstream": 0, "from_upstream": 0}
        self.lock = threading.Lock()

    def run(self) -> None:
        """Accept connections until the process ends."""
        while True:
            client, _ = self.listener.accept()
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream))
        back = threading.Thread(target=self._pump, args=(upstream, client, "from_upstream"), daemon=True)
        back.start()
        self._pump(client, upstream, "to_upstream")
        back.join()
        client.close()
        upstream.close()

    def _pump(self, src: socket.socket, dst: socket.socket, way: str) -> None:
        try:
            while data := src.recv(1 << 20):
                dst.sendall(data)
                with self.lock:
                    self.counts[way] += len(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def snapshot(self) -> dict[str, int]:
        """The counts so far."""
        with self.lock:
            return dict(self.counts)


def parse_size(text: str) -> int:
    """``2G``, ``500M``, ``123456``: bytes."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    text = text.strip().upper()
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def rchar(pid: int) -> int:
    """Bytes the API processes (``pid`` and its children) have read, from /proc/<pid>/io."""
    total = 0
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            for line in Path(f"/proc/{proc.pid}/io").read_text().splitlines():
                if line.startswith("rchar:"):
                    total += int(line.split()[1])
        except (OSError, psutil.Error):
            pass
    return total


def wav_bytes(size: int, start: int, length: int, noise: bytes) -> bytes:
    """Bytes ``start .. start+length`` of a ``size``-byte PCM WAV (header, then repeating noise)."""
    header = form_bench.wav_header(size - 44)
    out = bytearray()
    if start < 44:
        out += header[start : min(44, start + length)]
    pos = max(start, 44)
    while len(out) < length:
        offset = (pos - 44) % len(noise)
        piece = noise[offset : offset + length - len(out)]
        out += piece
        pos += len(piece)
    return bytes(out)


def start_moto(run_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """moto's S3 server in its own process; (process, endpoint)."""
    port = form_bench.free_port()
    log = (run_dir / "moto.log").open("wb")
    code = (
        "from moto.server import ThreadedMotoServer; import time; "
        f"s = ThreadedMotoServer(ip_address='127.0.0.1', port={port}, verbose=False); s.start(); "
        "time.sleep(10**9)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            requests.get(endpoint, timeout=1)
            return proc, endpoint
        except requests.RequestException:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("bench_uploads: moto did not start")


def start_api(run_dir: Path, endpoint: str, public: str, size: int) -> tuple[Child, Child, int]:
    """Redis, a migrated SQLite database and ``jobservice api`` on S3 (its own calls to ``endpoint``,
    the presigned URLs it hands out to ``public``); (redis, api, port). The form bench's start,
    with these settings."""
    size_mb = str(size // MB + 64)
    extra = {
        **CREDENTIALS,
        "JOBSERVICE_API_WORKERS": "1",  # one API process: the warm-up and the measure meet there
        "JOBSERVICE_STORAGE_BACKEND": "s3",
        "JOBSERVICE_S3_ENDPOINT_URL": endpoint,
        "JOBSERVICE_S3_PUBLIC_ENDPOINT_URL": public,
        "JOBSERVICE_S3_BUCKET": "bench-uploads",
        "JOBSERVICE_S3_ACCESS_KEY_ID": "testing",
        "JOBSERVICE_S3_SECRET_ACCESS_KEY": "testing",
        "JOBSERVICE_MAX_REQUEST_MB": size_mb,
        "JOBSERVICE_MAX_AUDIO_MB": size_mb,
        "JOBSERVICE_MAX_AUDIO_SECONDS": "1000000",
    }
    return form_bench.start_api(run_dir, extra, name="bench_direct_uploads")


def direct(base: str, size: int, noise: bytes, part_size: int | None = None) -> dict[str, Any]:
    """Declare, PUT the parts to S3, complete; what the client sent to the API and to S3."""
    to_api = 0
    declaration: dict[str, Any] = {"filename": "speech.wav", "size": size, "content_type": "audio/wav"}
    if part_size:
        declaration["part_size"] = part_size
    body = json.dumps(declaration)
    to_api += len(body)
    declared = requests.post(
        f"{base}/uploads", data=body, headers={"Content-Type": "application/json"}, timeout=60
    )
    declared.raise_for_status()
    view = declared.json()
    to_store = 0
    started = time.monotonic()
    for part in view["parts"]:
        data = wav_bytes(size, part["offset"], part["size"], noise)
        put = requests.put(part["url"], data=data, timeout=600)
        put.raise_for_status()
        to_store += len(data)
    put_s = time.monotonic() - started
    completed = requests.post(base + view["complete_url"], timeout=600)
    complete_s = time.monotonic() - started - put_s
    answer = completed.json()
    return {
        "status": completed.status_code,
        "upload": answer.get("status") or answer.get("error", {}).get("code"),
        "parts": len(view["parts"]),
        "duration_s": (answer.get("facts") or {}).get("duration_s"),
        "bytes_sent_to_api": to_api,
        "bytes_sent_to_s3": to_store,
        "put_seconds": round(put_s, 1),
        "complete_seconds": round(complete_s, 2),
    }


def form(port: int, size: int, portrait: bytes) -> dict[str, Any]:
    """The same size of audio as one multipart POST /jobs through the API."""
    body = form_bench.submission(portrait, size)
    started = time.monotonic()
    status, code = form_bench.post(port, body)
    return {"status": status, "answer": code, "bytes_sent_to_api": body.length(),
            "seconds": round(time.monotonic() - started, 1)}  # fmt: skip


PROXIES: dict[str, CountingProxy] = {}


def measure(pid: int, send: Any) -> dict[str, Any]:
    """``send()``'s answer with the API's peak RSS above before (MB) and the bytes it received:
    from clients and from S3 (counted on the wire by the proxies), and every byte its processes
    read from files and pipes (``rchar``; socket receives are not in it)."""
    read_before = rchar(pid)
    api_before, s3_before = PROXIES["api"].snapshot(), PROXIES["s3"].snapshot()
    result = form_bench.measured(pid, send)
    answer = result.pop("answer")
    api_after, s3_after = PROXIES["api"].snapshot(), PROXIES["s3"].snapshot()
    return {
        **answer,
        **result,
        "api_received_from_clients": api_after["to_upstream"] - api_before["to_upstream"],
        "api_received_from_s3": s3_after["from_upstream"] - s3_before["from_upstream"],
        "api_sent_to_s3": s3_after["to_upstream"] - s3_before["to_upstream"],
        "api_rchar": rchar(pid) - read_before,
    }


def main() -> None:
    """Run the comparison and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="2G", help="file size: 2G, 500M, ... (default 2G)")
    parser.add_argument("--no-form", action="store_true", help="skip the plain form upload")
    parser.add_argument("--keep", action="store_true", help="keep the run folder")
    args = parser.parse_args()
    size = parse_size(args.size)
    run_dir = ROOT / "var" / "bench" / f"uploads-{int(time.time())}"
    run_dir.mkdir(parents=True)
    moto, endpoint = start_moto(run_dir)
    PROXIES["s3"] = CountingProxy(int(endpoint.rsplit(":", 1)[1]))
    PROXIES["s3"].start()
    redis_child, api, api_port = start_api(run_dir, f"http://127.0.0.1:{PROXIES['s3'].port}", endpoint, size)
    PROXIES["api"] = CountingProxy(api_port)
    PROXIES["api"].start()
    port = PROXIES["api"].port  # every request to the API goes through the counting proxy
    base = f"http://127.0.0.1:{port}"
    noise = os.urandom(4 * MB)
    try:
        assert api.process is not None
        pid = api.process.pid
        figures: dict[str, Any] = {
            "size_bytes": size,
            "api_rss_before_mb": round(form_bench.RssSampler(pid).rss() / MB, 1),
        }
        # The same calls for a small file: what does not grow with the size (the database, S3's
        # answers, the WAV header, a request thread's first use) shows here too.
        figures["direct_6mb"] = measure(pid, lambda: direct(base, 6 * MB, noise, part_size=5 * MB))
        print("direct_6mb:", json.dumps(figures["direct_6mb"]), flush=True)
        figures["direct"] = measure(pid, lambda: direct(base, size, noise))
        print("direct:", json.dumps(figures["direct"]), flush=True)
        if not args.no_form:
            portrait = (ROOT / "samples" / "portrait.png").read_bytes()
            figures["form"] = measure(pid, lambda: form(port, size, portrait))
            print("form:", json.dumps(figures["form"]), flush=True)
    finally:
        api.stop()
        redis_child.stop()
        moto.terminate()
        moto.wait(30)
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
