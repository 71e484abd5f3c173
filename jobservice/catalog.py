"""The model catalog: which models exist, what they take, and how their output is judged.

Lives on the API side (no torch). The API validates requests against a model's parameter
schema; the fleet (``jobservice.fleet``) hands each job to a card group that may serve its model,
whose worker looks up the adapter named here. Parameter schemas are pydantic models, so
``/models`` and ``/openapi.json`` show their defaults and limits as JSON Schema.

A leaf: the data types only (``ModelSpec``, ``ModelParams``, ``ValidationPolicy``, ``WorkerGroup``,
``Catalog``); it imports nothing of the project, and anything may import it. The models
themselves come from ``jobservice.families`` (the built-in ones and a deployment file's).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Task = Literal["audio2video", "text2video"]
Maturity = Literal["reference", "contract-tested", "hardware-verified"]


class ValidationPolicy(BaseModel):
    """Thresholds of the output gate for one model (overridable per deployment)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    black_min_seconds: float = Field(
        default=0.5, gt=0, description="blackdetect d=: shortest black run noticed."
    )
    black_pixel_threshold: float = Field(default=0.10, ge=0, le=1, description="blackdetect pix_th=.")
    black_picture_ratio: float = Field(default=0.98, ge=0, le=1, description="blackdetect pic_th=.")
    max_black_seconds: float = Field(default=0.0, ge=0, description="Total black time allowed.")
    freeze_noise_db: float = Field(default=-60.0, le=0, description="freezedetect n= in dB.")
    freeze_min_seconds: float = Field(default=2.0, gt=0, description="freezedetect d=.")
    max_freeze_seconds: float = Field(default=0.0, ge=0, description="Total frozen time allowed.")
    frame_tolerance: int = Field(default=1, ge=0, description="Allowed |expected - actual| frames.")
    duration_tolerance_seconds: float = Field(default=0.12, ge=0, description="Against the input audio.")
    fps_tolerance: float = Field(default=0.01, ge=0)


class ModelParams(BaseModel):
    """Base of every model's parameter schema: unknown parameters are refused."""

    model_config = ConfigDict(extra="forbid")


MAX_GATE_RETRIES = 10  # the most tries with the next seed a job or a deployment may ask for


@dataclass(frozen=True)
class ModelSpec:
    """One catalog entry."""

    id: str
    task: Task
    title: str
    summary: str
    maturity: Maturity
    params: type[ModelParams]
    adapter: str  # "module:Class" under workers.adapters, imported only by workers
    inputs: tuple[str, ...] = ()
    cards: int = 1
    devices: tuple[str, ...] = ("cpu", "cuda", "npu")
    requires: tuple[str, ...] = ()  # importable packages the adapter needs (checked without importing)
    execution_mode: str = "resident"
    # Its adapter streams frames as it renders them (chunks): a running job publishes previews of
    # them. False: the back end hands over its video only once it is finished (a file, or every frame
    # at once), and no preview exists.
    previews: bool = False
    validation: ValidationPolicy = field(default_factory=ValidationPolicy)
    timeout_seconds: float | None = None
    # A failed gate runs the job again with the next seed, up to this many times, unless the job
    # asks otherwise (jobservice.jobs.retries); a deployment file sets it per model.
    retry_on_validation_failure: int = 0  # at most MAX_GATE_RETRIES
    # --- set by a deployment file (jobservice.families) for the real model families -----------
    backend: str = "builtin"  # adapter family: builtin, flashhead, flashtalk, omnirt, vllm-omni, diffusers
    config: dict[str, Any] = field(default_factory=dict)  # handed to Adapter.load as ``params``
    min_memory_gb: float | None = None  # free device memory needed before loading
    memory_scope: Literal["aggregate", "per_card"] = "aggregate"
    # What running it costs, until the service has measured it (jobservice.fleet.costs).
    load_seconds: float | None = None
    seconds_per_output_second: float | None = None
    required_paths: tuple[tuple[str, str], ...] = ()  # (name, path) that must exist on the worker host

    def describe(self) -> dict[str, object]:
        """A JSON-ready description for ``GET /models``."""
        return {
            "id": self.id,
            "task": self.task,
            "title": self.title,
            "summary": self.summary,
            "maturity": self.maturity,
            "inputs": list(self.inputs),
            "cards": self.cards,
            "devices": list(self.devices),
            "execution_mode": self.execution_mode,
            "previews": self.previews,
            "backend": self.backend,
            "min_memory_gb": self.min_memory_gb,
            "timeout_seconds": self.timeout_seconds,
            "retry_on_validation_failure": self.retry_on_validation_failure,
            "parameters": self.params.model_json_schema(),
            "validation": self.validation.model_dump(),
        }


class Catalog:
    """The models a deployment offers, by id."""

    def __init__(
        self,
        specs: list[ModelSpec],
        *,
        defaults: dict[str, str] | None = None,
        groups: list[WorkerGroup] | None = None,
    ) -> None:
        self._specs = {spec.id: spec for spec in specs}
        self._defaults = dict(defaults or {})  # task -> model id chosen when a request names none
        self.groups = list(groups or [])  # card groups of a deployment file

    def get(self, model_id: str) -> ModelSpec | None:
        """The spec of ``model_id``, or None."""
        return self._specs.get(model_id)

    def all(self) -> list[ModelSpec]:
        """Every model, in catalog order."""
        return list(self._specs.values())

    def for_task(self, task: str) -> list[ModelSpec]:
        """Models that perform ``task``."""
        return [s for s in self._specs.values() if s.task == task]

    def default_for(self, task: str) -> ModelSpec | None:
        """The deployment's default for ``task``, else the first model listed for it."""
        chosen = self._defaults.get(task)
        if chosen and chosen in self._specs:
            return self._specs[chosen]
        models = self.for_task(task)
        return models[0] if models else None

    def ids(self) -> list[str]:
        """Model ids in catalog order."""
        return list(self._specs)

    def group_for(self, devices: str, name: str | None = None) -> WorkerGroup | None:
        """The deployment's card group named ``name`` (or, unnamed, written ``name`` in the file's
        devices: a container whose cards a device plugin renumbered names its group so), else the
        one launched with exactly ``devices`` (e.g. ``npu:2,3``; several CPU groups are told apart by
        name), if any. Devices are canonical labels (``npu:4,5,6,7``)."""
        if name:
            for group in self.groups:
                if group.name == name:
                    return group
            for group in self.groups:
                if group.name is None and group.devices == name:
                    return group
        for group in self.groups:
            if group.devices == devices and (not name or group.name is None):
                return group
        return None

    def longest_timeout(self, models: Iterable[str] | None = None, *, default: float) -> float:
        """The longest run limit among ``models`` (None: every model): each model's own timeout,
        else ``default`` (the service's ``job_timeout_seconds``); ``default`` when none is known."""
        chosen = self.all() if models is None else [s for m in models if (s := self.get(m)) is not None]
        return max((spec.timeout_seconds or default for spec in chosen), default=default)

    def config_for(self, spec: ModelSpec, devices: str, name: str | None = None) -> dict[str, Any]:
        """``spec.config`` with the overrides of the card group (``name``, else on ``devices``) applied."""
        group = self.group_for(devices, name)
        override = group.config.get(spec.id, {}) if group else {}
        return {**spec.config, **override}


@dataclass(frozen=True)
class WorkerGroup:
    """A card group of a deployment file: one worker on ``devices`` that may serve ``models``
    (eligible: what it holds at a time is decided by ``jobservice.fleet``)."""

    devices: str  # canonical label, e.g. "npu:2,3"
    models: tuple[str, ...]
    name: str | None = None
    config: dict[str, dict[str, Any]] = field(default_factory=dict)  # per-model config overrides
    memory_gb: float | None = None  # per card; None: read from the cards (or no limit on the CPU)
