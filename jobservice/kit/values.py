"""An overlay's choices for the generated workers (``kit.yaml`` beside its ``kustomization.yaml``).

Everything a site decides and the deployment file does not say: the image, the device plugin's
resource name and the runtime class of its cards, where pods may go, the volumes the model paths
live on, the shared memory torchrun needs, requests, and the optional autoscaling.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class KitError(ValueError):
    """A kit.yaml that cannot be used, or a deployment file the kit cannot place; the message says why."""


class ModelVolume(BaseModel):
    """A node folder (or a PersistentVolumeClaim) the model paths of the deployment file lie under,
    mounted read-only at the same path in every worker."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=50)
    path: str = Field(description="The path inside the container (the deployment file's paths).")
    host_path: str | None = Field(default=None, description="The node's folder (default: path).")
    claim: str | None = Field(default=None, description="A PersistentVolumeClaim instead of a node folder.")

    @field_validator("path", "host_path")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"'{value}' is not an absolute path")
        return value.rstrip("/") or "/" if value is not None else None


class Autoscaling(BaseModel):
    """A KEDA ScaledObject per card-group set, on the queued work the set may serve."""

    model_config = ConfigDict(extra="forbid")

    prometheus: str = Field(
        description="The Prometheus KEDA queries, e.g. http://prometheus-operated.monitoring:9090."
    )
    min_replicas: int = Field(
        default=1, ge=1, description="Never 0 by default: a model's load takes minutes."
    )
    max_replicas: int = Field(default=2, ge=1)
    target_work_seconds: float = Field(
        default=3600.0,
        gt=0,
        description="Card-seconds of queued work per replica (queued output seconds times each model's "
        "seconds of generation per output second).",
    )
    cooldown_seconds: int = Field(default=1800, ge=0)


class KitValues(BaseModel):
    """One overlay's ``kit.yaml``."""

    model_config = ConfigDict(extra="forbid")

    deployment_file: Path = Field(description="The deployment file, relative to kit.yaml.")
    image: str = Field(
        default="jobservice-worker", description="The worker image (an overlay's images: sets its tag)."
    )
    device_resource: str | None = Field(
        default=None, description="The device plugin's resource, e.g. nvidia.com/gpu or huawei.com/Ascend910."
    )
    runtime_class: str | None = Field(default=None, description="runtimeClassName of the worker pods.")
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    supplemental_groups: list[int] = Field(
        default_factory=list, description="Groups of the device files (Ascend: HwHiAiUser's, often 1000)."
    )
    shm_size: str = Field(
        default="1Gi", description="Size of /dev/shm (torchrun's workers share tensors there)."
    )
    scratch_size: str = Field(default="50Gi", description="Size limit of the worker's scratch folder.")
    requests: dict[str, str] = Field(default_factory=lambda: {"cpu": "2", "memory": "8Gi"})
    limits: dict[str, str] = Field(default_factory=dict)
    model_volumes: list[ModelVolume] = Field(default_factory=list)
    image_paths: list[str] = Field(
        default_factory=list,
        description="Folders the worker image itself carries (CANN's toolkit): paths of the deployment "
        "file under them need no volume.",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="More JOBSERVICE_* settings for the workers."
    )
    autoscaling: Autoscaling | None = None

    @property
    def source(self) -> Path:
        """The kit.yaml this was read from (set by ``load_values``)."""
        return self._source

    _source: Path = Path(".")


def load_values(path: Path) -> KitValues:
    """Read and check an overlay's kit.yaml; the deployment file's path resolves against its folder."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        values = KitValues.model_validate(raw)
    except (OSError, yaml.YAMLError) as exc:
        raise KitError(f"{path}: cannot read it: {exc}") from None
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        raise KitError(f"{path}: {where}: {first['msg']}") from None
    values._source = path
    return values
