"""What a batch ran on, recorded with it so a regression can be traced to a change of environment.

Two halves: where the batch was created (host, service version and commit), and, once its jobs
ended, what actually ran them, read from the RunReports (worker, backend, device, torch, ffmpeg,
driver, commit) and from the workers table (the host's cards).
"""

from __future__ import annotations

import getpass
import platform
import socket
import sys
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from jobservice import __version__
from jobservice.db.tables import WorkerRecord
from jobservice.nightly.figures import RunFacts
from jobservice.reports.buildinfo import commit, driver_versions


def creator_environment() -> dict[str, Any]:
    """The machine and service version that created a batch."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = None
    return {
        "host": socket.gethostname(),
        "user": user,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "jobservice": __version__,
        "commit": commit(),
        "drivers": driver_versions(),
    }


def runs_environment(session: Session, runs: list[RunFacts]) -> dict[str, Any]:
    """The workers, devices and versions that ran ``runs``, each distinct value listed once."""
    versions: dict[str, set[str]] = {}
    workers: dict[str, dict[str, Any]] = {}
    for run in runs:
        info = run.info
        for name, value in (info.get("versions") or {}).items():
            versions.setdefault(name, set()).add(str(value))
        worker_id = info.get("worker_id")
        if worker_id:
            node = str(worker_id).split("#", 1)[0]
            workers.setdefault(
                node, {"backend": info.get("backend"), "device": info.get("device"), "runs": 0}
            )
            workers[node]["runs"] += 1
    if workers:
        records = session.scalars(select(WorkerRecord).where(WorkerRecord.id.in_(list(workers))))
        for record in records:
            host = (record.info or {}).get("host") or {}
            workers[record.id].update(
                hostname=record.hostname,
                cards=[
                    f"{c.get('kind')}:{c.get('index')} {c.get('name')}".strip()
                    for c in host.get("cards") or []
                ],
                cpu_count=host.get("cpu_count"),
            )
    return {
        "workers": workers,
        "versions": {name: sorted(values) for name, values in sorted(versions.items())},
    }


def environment_changes(baseline: dict[str, Any], candidate: dict[str, Any]) -> list[str]:
    """Sentences naming what differs between two batches' environments (versions, hosts, cards)."""
    changes = []
    old_versions = (baseline.get("runs") or {}).get("versions") or {}
    new_versions = (candidate.get("runs") or {}).get("versions") or {}
    for name in sorted(set(old_versions) | set(new_versions)):
        old, new = old_versions.get(name), new_versions.get(name)
        if old != new:
            changes.append(f"{name}: {', '.join(old or ['-'])} -> {', '.join(new or ['-'])}")

    def hardware(env: dict[str, Any]) -> set[str]:
        found = set()
        for node, worker in ((env.get("runs") or {}).get("workers") or {}).items():
            cards = ", ".join(worker.get("cards") or []) or str(worker.get("device"))
            found.add(f"{worker.get('hostname') or node.split('@')[-1]} [{cards}]")
        return found

    old_hw, new_hw = hardware(baseline), hardware(candidate)
    if old_hw != new_hw:
        changes.append(f"hardware: {'; '.join(sorted(old_hw)) or '-'} -> {'; '.join(sorted(new_hw)) or '-'}")
    return changes
