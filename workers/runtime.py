"""Per-process worker state: settings, services, the pinned device and the resident models."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache

from jobservice import __version__
from jobservice.placement import parse_devices
from jobservice.services import Services
from workers.adapters.base import DeviceContext
from workers.registry import ResidentModels

log = logging.getLogger(__name__)


@dataclass
class WorkerRuntime:
    """Everything a worker process needs to run jobs, built once per process."""

    services: Services
    device: DeviceContext
    models: list[str]
    node: str
    resident: ResidentModels = field(init=False)

    def __post_init__(self) -> None:
        self.resident = ResidentModels(self.device)

    @property
    def worker_id(self) -> str:
        """Identifies this process as the owner of a run (node plus pid: a restarted child is a new owner)."""
        return f"{self.node}#{os.getpid()}"

    @classmethod
    def create(cls, services: Services, *, node: str | None = None) -> WorkerRuntime:
        """Build the runtime from settings (devices come from ``JOBSERVICE_WORKER_DEVICES``)."""
        settings = services.settings
        device = parse_devices(settings.worker_devices)
        models = settings.worker_models or services.catalog.ids()
        return cls(services=services, device=device, models=models, node=node or default_node(device))


def default_node(device: DeviceContext) -> str:
    """``<device label>@<hostname>``, e.g. ``npu:2,3@host``."""
    return f"{device.label}@{socket.gethostname()}"


@cache
def ffmpeg_version() -> str:
    """The first line of ``ffmpeg -version`` (cached per process)."""
    try:
        out = subprocess.run(["ffmpeg", "-version"], capture_output=True, text=True, timeout=10).stdout
        return out.splitlines()[0].split(" Copyright")[0] if out else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "missing"


def versions() -> dict[str, str]:
    """Versions recorded in every RunReport."""
    found = {"jobservice": __version__, "python": sys.version.split()[0], "ffmpeg": ffmpeg_version()}
    torch = sys.modules.get("torch")
    if torch is not None:
        found["torch"] = str(torch.__version__)
    return found
