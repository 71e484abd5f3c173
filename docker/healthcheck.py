"""Container health checks of the jobservice images (HEALTHCHECK / compose `healthcheck:`).

    python /usr/local/lib/jobservice/healthcheck.py api      # GET /healthz answers 200
    python /usr/local/lib/jobservice/healthcheck.py worker   # this container's worker row is fresh
    python /usr/local/lib/jobservice/healthcheck.py beat     # the beat's control consumer answers a ping

Exit 0: healthy, 1: not. The worker check reads the presence row the worker's maintenance thread
refreshes every JOBSERVICE_REAP_INTERVAL_SECONDS (what /readyz counts as online), so it fails when
the worker lost its database or hangs, not only when the process is gone.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import urllib.error
import urllib.request


def _host_header() -> str:
    """A Host name the API answers for (JOBSERVICE_ALLOWED_HOSTS may leave out loopback names)."""
    try:
        allowed = json.loads(os.environ.get("JOBSERVICE_ALLOWED_HOSTS") or "[]")
    except ValueError:
        allowed = []
    if not allowed or "*" in allowed or "localhost" in allowed:
        return "localhost"
    first = str(allowed[0])
    return "health" + first[1:] if first.startswith("*.") else first


def api() -> bool:
    port = os.environ.get("JOBSERVICE_API_PORT", "8000")
    request = urllib.request.Request(f"http://127.0.0.1:{port}/healthz", headers={"Host": _host_header()})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - fixed local URL
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError) as exc:
        print(f"api: {exc}", file=sys.stderr)
        return False


def worker() -> bool:
    from sqlalchemy import func, select

    from jobservice.db.engine import Database
    from jobservice.db.tables import WorkerRecord, utcnow
    from jobservice.fleet.presence import stale_after
    from jobservice.settings import Settings

    settings = Settings()
    query = select(func.max(WorkerRecord.last_seen_at)).where(
        WorkerRecord.hostname == socket.gethostname(), WorkerRecord.stopped_at.is_(None)
    )
    with Database(settings.resolved_database_url()).session() as session:
        seen = session.scalar(query)
    if seen is None:
        print("worker: no presence row for this container yet", file=sys.stderr)
        return False
    age = (utcnow() - seen).total_seconds()
    if age > stale_after(settings):
        print(f"worker: last seen {age:.0f} s ago", file=sys.stderr)
        return False
    return True


def beat() -> bool:
    from celery import Celery

    from jobservice.settings import Settings

    app = Celery(broker=Settings().broker_url)
    replies = app.control.ping(destination=[f"control@{socket.gethostname()}"], timeout=5)
    return bool(replies)


def main() -> int:
    checks = {"api": api, "worker": worker, "beat": beat}
    if len(sys.argv) != 2 or sys.argv[1] not in checks:
        print(f"usage: healthcheck.py {'|'.join(checks)}", file=sys.stderr)
        return 2
    try:
        return 0 if checks[sys.argv[1]]() else 1
    except Exception as exc:  # noqa: BLE001 - any failure is "unhealthy", said in one line
        print(f"{sys.argv[1]}: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
