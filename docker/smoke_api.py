"""The HTTP side of docker/smoke.sh: talks to the API published by the compose stack.

Standard library only (runs on the host's python3). Every command prints one JSON object on
stdout and exits non-zero when what it checks does not hold.

    smoke_api.py ready URL [--timeout S]                   wait for /readyz 200
    smoke_api.py workers URL N [--timeout S]               wait until N workers are online (admin key)
    smoke_api.py a2v URL IMAGE AUDIO                       submit an audio2video job
    smoke_api.py t2v URL PROMPT [--frames N]               submit a text2video job
    smoke_api.py running URL JOB [--timeout S]             wait until JOB is generating on a worker
    smoke_api.py finish URL JOB [--timeout S]              wait until JOB finishes; check its video
    smoke_api.py once URL JOB [--not-worker W]             events: exactly one transition to succeeded

The key is read from SMOKE_API_KEY (sent as `Authorization: Bearer`).
"""

# ruff: noqa: S310 - every URL here is the smoke stack's own http:// address

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

FINISHED = {"succeeded", "failed", "canceled"}


def call(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> Any:
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
    key = os.environ.get("SMOKE_API_KEY")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


def get(url: str) -> Any:
    return call("GET", url)


def out(obj: dict[str, Any], ok: bool = True) -> int:
    print(json.dumps(obj))
    return 0 if ok else 1


def ready(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.timeout
    started = time.monotonic()
    last: str = ""
    while time.monotonic() < deadline:
        try:
            body = get(f"{args.url}/readyz")
            if body.get("ready"):
                return out({"ready": True, "waited_s": round(time.monotonic() - started, 1)})
            last = json.dumps(body.get("checks"))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            last = str(exc)
        time.sleep(1)
    return out({"ready": False, "last": last}, ok=False)


def workers(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            body = get(f"{args.url}/readyz")
            if body.get("workers_online", 0) >= args.count:
                hosts = sorted(w["hostname"] for w in body.get("workers", []))
                return out({"workers_online": body["workers_online"], "hostnames": hosts})
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(1)
    return out({"workers_online": body.get("workers_online"), "wanted": args.count}, ok=False)


def multipart(fields: dict[str, str], files: dict[str, Path]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts: list[bytes] = []
    for name, value in fields.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        )
    for name, path in files.items():
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{path.name}"\r\n'
        parts.append(
            head.encode() + b"Content-Type: application/octet-stream\r\n\r\n" + path.read_bytes() + b"\r\n"
        )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def a2v(args: argparse.Namespace) -> int:
    body, ctype = multipart({"task": "audio2video"}, {"image": Path(args.image), "audio": Path(args.audio)})
    job = call("POST", f"{args.url}/jobs", body, {"Content-Type": ctype})
    return out({"id": job["id"], "model": job["model"], "status": job["status"]})


def t2v(args: argparse.Namespace) -> int:
    payload = {"task": "text2video", "prompt": args.prompt, "num_frames": args.frames, "seed": 3}
    job = call("POST", f"{args.url}/jobs", json.dumps(payload).encode(), {"Content-Type": "application/json"})
    return out({"id": job["id"], "model": job["model"], "status": job["status"]})


def running(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = get(f"{args.url}/jobs/{args.job}")
        if job["status"] in FINISHED:
            break
        if job["status"] == "running" and job["stage"] == "generating" and job.get("worker_id"):
            return out({"id": job["id"], "worker_id": job["worker_id"], "progress": job["progress"]})
        time.sleep(0.2)
    return out({"id": args.job, "status": job.get("status"), "stage": job.get("stage")}, ok=False)


def video_bytes(url: str) -> int:
    """GET /jobs/<id>/video, following the 302 to the presigned S3 URL (no key sent there)."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {os.environ['SMOKE_API_KEY']}"})

    class NoAuthOnRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
            return urllib.request.Request(newurl)

    opener = urllib.request.build_opener(NoAuthOnRedirect)
    with opener.open(request, timeout=30) as response:
        data = response.read()
    if data[4:8] != b"ftyp":
        raise ValueError(f"not an MP4 ({len(data)} bytes)")
    return len(data)


def finish(args: argparse.Namespace) -> int:
    started = time.monotonic()
    deadline = started + args.timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = get(f"{args.url}/jobs/{args.job}")
        if job["status"] in FINISHED:
            break
        time.sleep(0.5)
    result: dict[str, Any] = {
        "id": args.job,
        "status": job.get("status"),
        "attempts": job.get("attempts"),
        "worker_id": job.get("worker_id"),
        "verdict": (job.get("validation") or {}).get("verdict"),
        "error": job.get("error"),
        "waited_s": round(time.monotonic() - started, 1),
    }
    ok = job.get("status") == "succeeded"
    if ok:
        try:
            result["video_bytes"] = video_bytes(f"{args.url}/jobs/{args.job}/video")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            result["video_error"] = str(exc)
            ok = False
    return out(result, ok=ok)


def once(args: argparse.Namespace) -> int:
    events = get(f"{args.url}/jobs/{args.job}/events")["events"]
    wins = [e for e in events if e["to"] == "succeeded"]
    result = {
        "id": args.job,
        "transitions": [f"{e['from']}->{e['to']}@{e['attempt']}" for e in events],
        "succeeded_transitions": len(wins),
        "succeeded_on": wins[0]["worker_id"] if wins else None,
    }
    ok = len(wins) == 1 and (not args.not_worker or wins[0]["worker_id"] != args.not_worker)
    return out(result, ok=ok)


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn in (("ready", ready), ("workers", workers), ("a2v", a2v), ("t2v", t2v)):
        p = sub.add_parser(name)
        p.set_defaults(fn=fn)
        p.add_argument("url")
        if name == "workers":
            p.add_argument("count", type=int)
        if name == "a2v":
            p.add_argument("image")
            p.add_argument("audio")
        if name == "t2v":
            p.add_argument("prompt")
            p.add_argument("--frames", type=int, default=33)
        p.add_argument("--timeout", type=float, default=240)
    for name, fn in (("running", running), ("finish", finish), ("once", once)):
        p = sub.add_parser(name)
        p.set_defaults(fn=fn)
        p.add_argument("url")
        p.add_argument("job")
        p.add_argument("--timeout", type=float, default=300)
        p.add_argument("--not-worker", default=None)
    args = parser.parse_args()
    try:
        return int(args.fn(args))
    except urllib.error.HTTPError as exc:
        return out({"error": f"HTTP {exc.code}", "body": exc.read().decode(errors="replace")[:500]}, ok=False)


if __name__ == "__main__":
    sys.exit(main())
