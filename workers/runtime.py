"""Per-process worker state: settings, services, the pinned device and the resident models."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from jobservice import __version__
from jobservice.catalog import ModelSpec
from jobservice.fleet.placement import card_memory_gb, parse_devices
from jobservice.media.probe import MediaToolMissing, ffmpeg_path
from jobservice.reports.buildinfo import commit, driver_versions
from jobservice.wiring import Services
from workers.adapters.base import DeviceContext
from workers.card_group import FleetMember
from workers.card_health import CardHealth, CardMonitor
from workers.finisher import Finisher
from workers.resident import ResidentModels

log = logging.getLogger(__name__)


@dataclass
class WorkerRuntime:
    """Everything a worker process needs to run jobs, built once per process."""

    services: Services
    device: DeviceContext
    models: list[str]
    node: str  # the card group's id in the fleet
    # Set in a Celery worker process: jobs are finished there while the card generates the next.
    finisher: Finisher | None = None
    memory_gb_per_card: float | None = None
    member: FleetMember = field(init=False)
    resident: ResidentModels = field(init=False)
    cards: CardMonitor = field(init=False)  # the group's cards as NVML / npu-smi see them

    def __post_init__(self) -> None:
        self.cards = CardMonitor(self.device)
        self.member = FleetMember(
            self.services,
            group_id=self.node,
            device=self.device,
            memory_gb_per_card=self.memory_gb_per_card,
            eligible=self.models,
        )
        self.resident = ResidentModels(self.device, config_for=self.model_config, member=self.member)

    def model_config(self, spec: ModelSpec) -> dict[str, Any]:
        """What ``Adapter.load`` gets: the model's deployment config with this card group's overrides,
        plus ``_runtime`` facts of this worker (its Redis, used by adapters that coordinate across
        workers such as the vLLM-Omni pool; its id; a folder for long-lived state)."""
        config = self.services.catalog.config_for(
            spec, self.device.label, self.services.settings.worker_group
        )
        settings = self.services.settings
        config["_runtime"] = {
            "broker_url": settings.broker_url,
            "broker_sentinel_master": settings.broker_sentinel_master,
            "worker_id": self.worker_id,
            "state_dir": str(settings.var_dir.resolve() / "workers"),
        }
        return config

    def read_cards(self) -> list[CardHealth] | None:
        """The group's cards now (None: nothing to read); a failure to read never fails a job."""
        try:
            return self.cards.read()
        except Exception:  # noqa: BLE001 - telemetry
            log.warning("reading the cards of %s failed", self.device.label, exc_info=True)
            return None

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
        return cls(
            services=services,
            device=device,
            models=models,
            node=node or default_node(device),
            memory_gb_per_card=group_memory_gb(services, device),
        )


def group_memory_gb(services: Services, device: DeviceContext) -> float | None:
    """Memory of each of the group's cards: what the deployment file's group or the worker's
    settings declare, else what the cards report (None on an undeclared CPU group: no limit)."""
    settings = services.settings
    group = services.catalog.group_for(device.label, settings.worker_group)
    if group is not None and group.memory_gb is not None:
        return group.memory_gb
    return settings.worker_memory_gb or card_memory_gb(device)


def default_node(device: DeviceContext) -> str:
    """``<device label>@<hostname>``, e.g. ``npu:2,3@host``."""
    return f"{device.label}@{socket.gethostname()}"


@cache
def ffmpeg_version() -> str:
    """The first line of ``ffmpeg -version`` (cached per process)."""
    try:
        argv = [ffmpeg_path("ffmpeg"), "-version"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
        return out.splitlines()[0].split(" Copyright")[0] if out else "unknown"
    except (OSError, subprocess.SubprocessError, MediaToolMissing):
        return "missing"


def versions() -> dict[str, str]:
    """Versions recorded in every RunReport."""
    found = {"jobservice": __version__, "python": sys.version.split()[0], "ffmpeg": ffmpeg_version()}
    torch = sys.modules.get("torch")
    if torch is not None:
        found["torch"] = str(torch.__version__)
    # Where a regression came from: the service's commit and the accelerator driver.
    if commit():
        found["commit"] = str(commit())
    found.update({f"driver_{vendor}": version for vendor, version in driver_versions().items()})
    return found
