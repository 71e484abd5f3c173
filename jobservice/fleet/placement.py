"""Placement: device groups (``--devices``), pinning them before torch loads, what a host has,
and which catalog models a device group can serve. No torch here: the launcher uses it.

A worker owns the cards it is launched with. The launcher sets ``CUDA_VISIBLE_DEVICES`` or
``ASCEND_RT_VISIBLE_DEVICES`` in the environment of the worker process before anything imports
torch, so torch inside the worker sees only its own cards, renumbered from 0
(reference/stack-probe.md section 4: CUDA cannot be initialised before fork or re-pinned after).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jobservice.catalog import Catalog, ModelSpec


@dataclass(frozen=True)
class DeviceContext:
    """The cards a worker owns, as torch sees them after pinning."""

    kind: str  # "cpu", "cuda" or "npu"
    indices: tuple[int, ...] = ()  # physical card ids given to the launcher
    torch_device: str = "cpu"  # "cpu", "cuda:0", "npu:0" (indices are remapped by *_VISIBLE_DEVICES)

    @property
    def count(self) -> int:
        """How many cards the group holds (1 for the CPU)."""
        return max(1, len(self.indices))

    @property
    def label(self) -> str:
        """Human form, e.g. ``npu:2,3`` or ``cpu``."""
        if self.kind == "cpu":
            return "cpu"
        return f"{self.kind}:{','.join(str(i) for i in self.indices)}"


KINDS = ("cpu", "cuda", "npu")
VISIBLE_ENV = {"cuda": "CUDA_VISIBLE_DEVICES", "npu": "ASCEND_RT_VISIBLE_DEVICES"}
_SPEC = re.compile(r"^(?P<kind>cpu|cuda|gpu|npu)(?::(?P<ids>[0-9,\-\s]+))?$")


class DeviceSpecError(ValueError):
    """A ``--devices`` value that cannot be understood."""


def parse_devices(spec: str) -> DeviceContext:
    """Parse ``cpu``, ``cuda:0``, ``cuda:0,1``, ``npu:2,3`` or ``npu:4-7`` into a device group."""
    match = _SPEC.match(spec.strip().lower())
    if not match:
        raise DeviceSpecError(f"cannot read devices '{spec}': use cpu, cuda:0, cuda:0,1, npu:2,3 or npu:4-7")
    kind = "cuda" if match["kind"] == "gpu" else match["kind"]
    raw = (match["ids"] or "").replace(" ", "")
    if kind == "cpu":
        if raw:
            raise DeviceSpecError("cpu takes no card numbers")
        return DeviceContext(kind="cpu", indices=(), torch_device="cpu")
    if not raw:
        raise DeviceSpecError(f"{kind} needs card numbers, e.g. {kind}:0")
    indices: list[int] = []
    for part in raw.split(","):
        if not part:
            continue
        if "-" in part:
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or not hi.isdigit() or int(hi) < int(lo):
                raise DeviceSpecError(f"bad card range '{part}'")
            indices.extend(range(int(lo), int(hi) + 1))
        elif part.isdigit():
            indices.append(int(part))
        else:
            raise DeviceSpecError(f"bad card number '{part}'")
    if not indices:
        raise DeviceSpecError(f"{kind} needs card numbers, e.g. {kind}:0")
    if len(set(indices)) != len(indices):
        raise DeviceSpecError(f"card listed twice in '{spec}'")
    return DeviceContext(kind=kind, indices=tuple(indices), torch_device=f"{kind}:0")


def pinning_env(device: DeviceContext) -> dict[str, str]:
    """Environment variables that pin a worker process to ``device`` (set before torch loads)."""
    env: dict[str, str] = {}
    if device.kind == "cpu":
        # Hide every accelerator so nothing on a CPU worker grabs a card by accident.
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["ASCEND_RT_VISIBLE_DEVICES"] = ""
    else:
        env[VISIBLE_ENV[device.kind]] = ",".join(str(i) for i in device.indices)
        other = "npu" if device.kind == "cuda" else "cuda"
        env[VISIBLE_ENV[other]] = ""
    return env


def nvidia_smi_rows(fields: Sequence[str]) -> list[dict[str, str]] | None:
    """One row per card of ``nvidia-smi --query-gpu=<fields>``, keyed by field (values as printed,
    units stripped); None when nvidia-smi is missing, fails or does not know a field."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    return parse_nvidia_smi(out, fields)


def parse_nvidia_smi(text: str, fields: Sequence[str]) -> list[dict[str, str]]:
    """The rows of nvidia-smi's ``--format=csv,noheader,nounits`` output (lines of other widths are
    skipped)."""
    rows = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == len(fields):
            rows.append(dict(zip(fields, parts, strict=True)))
    return rows


def _nvidia_smi() -> list[dict[str, Any]]:
    cards = []
    for row in nvidia_smi_rows(("index", "name", "memory.total", "memory.free")) or []:
        try:
            total, free = float(row["memory.total"]), float(row["memory.free"])
        except ValueError:  # "[N/A]": a card that does not say
            continue
        if row["index"].isdigit():
            cards.append(
                {
                    "kind": "cuda",
                    "index": int(row["index"]),
                    "name": row["name"],
                    "total_mb": total,
                    "free_mb": free,
                }
            )
    return cards


def npu_smi_text() -> str | None:
    """What ``npu-smi info`` prints; None when npu-smi is missing or fails."""
    if not shutil.which("npu-smi"):
        return None
    try:
        return subprocess.run(
            ["npu-smi", "info"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return None


NPU_HEALTH = ("OK", "Warning", "Alarm", "Critical")


def parse_npu_smi(text: str) -> list[dict[str, Any]]:
    """The cards of ``npu-smi info``: index (the NPU id), name, health (one of ``NPU_HEALTH``), and
    HBM total and free in MB where the card's second line shows them."""
    cards: list[dict[str, Any]] = []
    # Lines like "| 0     910B3  | OK ..." then "| 0 | 0000:C1:00.0 | 0  0 / 0  3874 / 65536 |".
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        head = re.match(r"^\|\s*(\d+)\s+(\S+)\s+\|\s*(OK|Warning|Alarm|Critical)", line)
        if head:
            current = {"kind": "npu", "index": int(head[1]), "name": head[2], "health": head[3]}
            cards.append(current)
            continue
        hbm = re.search(r"(\d+)\s*/\s*(\d+)\s*\|\s*$", line)
        if current is not None and hbm and "total_mb" not in current:
            used, total = float(hbm[1]), float(hbm[2])
            current.update(total_mb=total, free_mb=total - used)
    return cards


def _npu_smi() -> list[dict[str, Any]]:
    return parse_npu_smi(npu_smi_text() or "")


def inventory() -> dict[str, Any]:
    """The cards this host sees, with free memory where the vendor tool reports it."""
    cards = _nvidia_smi() + _npu_smi()
    return {
        "hostname": os.uname().nodename,
        "cpu_count": os.cpu_count() or 1,
        "cards": cards,
        "visible": {name: os.environ.get(name) for name in VISIBLE_ENV.values() if name in os.environ},
    }


def card_memory_gb(device: DeviceContext, host: dict[str, Any] | None = None) -> float | None:
    """Memory of the group's smallest card in GB, as nvidia-smi or npu-smi report it (None on the
    CPU, or when the vendor tool does not answer)."""
    if device.kind == "cpu":
        return None
    cards = (host or inventory())["cards"]
    sizes = [
        float(card["total_mb"]) / 1024
        for card in cards
        if card.get("kind") == device.kind and card.get("index") in device.indices and card.get("total_mb")
    ]
    return round(min(sizes), 1) if sizes else None


def unavailable_reason(spec: ModelSpec, device: DeviceContext) -> str | None:
    """Why a worker on ``device`` cannot serve ``spec`` (None if it can)."""
    if device.kind not in spec.devices:
        return f"runs on {', '.join(spec.devices)}, not {device.kind}"
    if spec.cards > device.count:
        return f"needs {spec.cards} cards, this worker has {device.count}"
    missing = [name for name in spec.requires if importlib.util.find_spec(name) is None]
    if missing:
        return f"missing Python packages: {', '.join(missing)}"
    # Named by their deployment-file keys only: /models and /readyz publish this reason.
    absent = [name for name, path in spec.required_paths if not path_exists(path)]
    if absent:
        return f"not found on this host: {'; '.join(absent)} (check the deployment file)"
    return None


def path_exists(path: str) -> bool:
    """A file or folder that exists, or a bare command name found on PATH."""
    if "/" not in path:
        return shutil.which(path) is not None
    return os.path.exists(path)


def servable_models(
    catalog: Catalog, device: DeviceContext, only: list[str] | None = None
) -> dict[str, str | None]:
    """Every catalog model (or those in ``only``) with why it cannot be served here (None = servable)."""
    result: dict[str, str | None] = {}
    for spec in catalog.all():
        if only and spec.id not in only:
            continue
        result[spec.id] = unavailable_reason(spec, device)
    return result
