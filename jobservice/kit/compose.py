"""What a compose override for a deployment file must hold, and where one differs.

The Ascend host's compose override (``docker/compose.ascend-910b.yaml``) is written by hand (its
devices, mounts and comments are a host's), so it is checked rather than generated: one worker
service per card group of the deployment file it mounts, on that group's devices, with a stable
group id (``JOBSERVICE_WORKER_NODE``: a recreated container would otherwise come back as a new group
beside a ghost) and a stop grace that covers the group's longest job.
"""

from __future__ import annotations

import re
from typing import Any

from jobservice.catalog import Catalog
from jobservice.fleet.placement import DeviceSpecError, parse_devices
from jobservice.fleet.stopping import stop_grace_seconds

_DURATION = re.compile(r"(?P<value>\d+(?:\.\d+)?)(?P<unit>h|ms|m|s|us|ns)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def duration_seconds(text: str | int | float) -> float:
    """A compose duration (``5m``, ``1h2m30s``, ``90s``; a bare number is seconds) in seconds."""
    if isinstance(text, int | float):
        return float(text)
    parts = list(_DURATION.finditer(text.strip()))
    if not parts or "".join(p.group(0) for p in parts) != text.strip():
        raise ValueError(f"'{text}' is not a compose duration (e.g. 32m, 1h2m, 90s)")
    return sum(float(p["value"]) * _UNITS[p["unit"]] for p in parts)


def worker_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services of a compose file that run a jobservice worker on cards (they set
    ``JOBSERVICE_WORKER_DEVICES``) and are not kept off by a profile."""
    found = {}
    for name, service in (compose.get("services") or {}).items():
        env = service.get("environment") or {}
        if isinstance(env, dict) and env.get("JOBSERVICE_WORKER_DEVICES") and not service.get("profiles"):
            found[name] = service
    return found


def compose_problems(compose: dict[str, Any], catalog: Catalog, *, job_timeout_seconds: float) -> list[str]:
    """Where a compose file's workers differ from the deployment file's card groups (none: agree)."""
    problems: list[str] = []
    services = worker_services(compose)
    by_devices: dict[str, list[str]] = {}
    for name, service in services.items():
        env = service["environment"]
        try:
            devices = parse_devices(str(env["JOBSERVICE_WORKER_DEVICES"])).label
        except DeviceSpecError as exc:
            problems.append(f"{name}: {exc}")
            continue
        by_devices.setdefault(devices, []).append(name)
        group = catalog.group_for(devices, None)
        if group is None:
            problems.append(f"{name} runs {devices}, which is no card group of the deployment file")
            continue
        if not str(env.get("JOBSERVICE_WORKER_NODE") or "").strip():
            problems.append(f"{name}: no JOBSERVICE_WORKER_NODE: a recreated container would be a new group")
        grace = stop_grace_seconds(catalog, group.models, job_timeout_seconds=job_timeout_seconds)
        given = duration_seconds(service.get("stop_grace_period", "10s"))
        if given < grace:
            problems.append(f"{name}: stop_grace_period is {given:g} s; its longest job needs {grace} s")
    for group in catalog.groups:
        names = by_devices.get(group.devices, [])
        if len(names) != 1:
            problems.append(
                f"card group {group.devices} has {len(names)} worker services ({', '.join(names)})"
            )
    nodes = [str(s["environment"].get("JOBSERVICE_WORKER_NODE")) for s in services.values()]
    if len(set(nodes)) != len(nodes):
        problems.append(f"two worker services share a JOBSERVICE_WORKER_NODE: {sorted(nodes)}")
    return problems
