"""Deployment files: which real models a site enables, where they live, and which cards run them.

A YAML or TOML file named by ``JOBSERVICE_DEPLOYMENT_FILE`` and read when the catalog is built, so
the API and every worker see the same catalog. It is validated as a whole when it is read; any
error names the file and the bad key (``models.soulx-flashhead-1.3b.launcher: ...``). Relative
paths resolve against the file's folder. Whether the paths exist is NOT checked here: the API
host rarely has the checkouts; the worker that would run a model checks them
(``ModelSpec.required_paths``) and skips the model with the reason.

Each entry is read with its family's schema (``jobservice.families.<family>``): the entry types
below are the registered families', so a new family needs no change here.
"""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from jobservice.catalog import Catalog, ModelSpec, ValidationPolicy, WorkerGroup
from jobservice.families.entry import EntryBase
from jobservice.families.family import FAMILIES, config_problem, known_backend
from jobservice.families.params import with_defaults
from jobservice.families.reference import reference_specs
from jobservice.fleet.placement import DeviceSpecError, parse_devices

__all__ = [
    "Deployment",
    "DeploymentError",
    "build_catalog",
    "default_catalog",
    "load_deployment",
    "parse_entry",
]

if TYPE_CHECKING:
    Entry = EntryBase
else:  # the registered families' entries, told apart by ``backend``
    Entry = Annotated[Union[tuple(f.entry for f in FAMILIES.values())], Field(discriminator="backend")]  # noqa: UP007
_ENTRY: TypeAdapter[EntryBase] = TypeAdapter(Entry)


class DeploymentError(ValueError):
    """A deployment file that cannot be used; the message names the file and the bad key."""


def with_known_backend(model_id: str, raw: Any) -> Any:
    """``raw`` with ``backend`` filled in for a well-known model id."""
    backend = known_backend(model_id)
    if isinstance(raw, dict) and "backend" not in raw and backend is not None:
        return {"backend": backend, **raw}
    return raw


def parse_entry(model_id: str, raw: dict[str, Any], *, base_dir: Path | None = None) -> EntryBase:
    """Validate one model entry (workers read ``ModelSpec.config`` back with it)."""
    context = {"base_dir": base_dir} if base_dir is not None else None
    return _ENTRY.validate_python(with_known_backend(model_id, raw), context=context)


class WorkerGroupEntry(BaseModel):
    """One card group: ``jobservice worker --devices <devices>`` serving ``models``."""

    model_config = ConfigDict(extra="forbid")

    devices: str
    models: list[str] = Field(min_length=1)
    name: str | None = None
    config: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Per-model overrides for this group, e.g. its own endpoints."
    )
    memory_gb: float | None = Field(
        default=None,
        gt=0,
        description="Memory of each card in GB (a CPU group declares it to hold only what fits; "
        "default: what nvidia-smi or npu-smi reports, none on the CPU).",
    )

    @field_validator("devices")
    @classmethod
    def _devices(cls, value: str) -> str:
        try:
            return parse_devices(value).label  # canonical, e.g. "npu:4-7" -> "npu:4,5,6,7"
        except DeviceSpecError as exc:
            raise ValueError(str(exc)) from None

    @property
    def card_count(self) -> int:
        """Cards in the group (1 for the CPU)."""
        return parse_devices(self.devices).count

    @property
    def cards(self) -> list[tuple[str, int]]:
        """(kind, index) of each card."""
        device = parse_devices(self.devices)
        return [(device.kind, i) for i in device.indices]


class DeploymentFile(BaseModel):
    """The whole file."""

    model_config = ConfigDict(extra="forbid")

    reference_models: bool = Field(default=True, description="Keep the built-in reference models.")
    default_models: dict[Literal["audio2video", "text2video"], str] = Field(default_factory=dict)
    models: dict[str, Entry] = Field(default_factory=dict)
    workers: list[WorkerGroupEntry] = Field(default_factory=list)

    @field_validator("models", mode="before")
    @classmethod
    def _known_backends(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return {mid: with_known_backend(mid, raw) for mid, raw in value.items()}


class Deployment:
    """A validated deployment file and what the catalog needs from it."""

    def __init__(self, data: DeploymentFile, *, source: Path) -> None:
        self.data = data
        self.source = source
        self._specs = {mid: self._spec(mid, entry) for mid, entry in data.models.items() if entry.enabled}
        self._overrides: list[dict[str, dict[str, Any]]] = []  # per group: resolved config overrides
        self._check_groups()

    @property
    def reference_models(self) -> bool:
        """Whether the built-in reference models stay in the catalog."""
        return self.data.reference_models

    def specs(self) -> list[ModelSpec]:
        """Catalog entries of the enabled models, in file order."""
        return list(self._specs.values())

    def default_models(self) -> dict[str, str]:
        """task -> model id used when a request names no model."""
        return {str(task): model_id for task, model_id in self.data.default_models.items()}

    def worker_groups(self) -> list[WorkerGroup]:
        """The card groups, with their per-model overrides."""
        return [
            WorkerGroup(
                devices=g.devices,
                models=tuple(g.models),
                name=g.name,
                config=overrides,
                memory_gb=g.memory_gb,
            )
            for g, overrides in zip(self.data.workers, self._overrides, strict=True)
        ]

    def _fail(self, where: str, message: str) -> DeploymentError:
        return DeploymentError(f"{self.source}: {where}: {message}")

    def _spec(self, model_id: str, entry: EntryBase) -> ModelSpec:
        family = FAMILIES[entry.backend]
        task = entry.task or family.task
        try:
            params = with_defaults(
                family.params(entry, task),
                entry.defaults,
                model_id=model_id,
                allowed_models=family.offered_models(entry),
            )
        except ValueError as exc:
            raise self._fail(f"models.{model_id}", str(exc)) from None
        try:
            policy = ValidationPolicy.model_validate({**family.policy.model_dump(), **entry.validation})
        except ValidationError as exc:
            raise self._fail(f"models.{model_id}.validation", _first_error(exc)) from None
        execution_mode = family.mode_of(entry, family.execution_mode)
        min_memory = (
            entry.min_memory_gb if "min_memory_gb" in entry.model_fields_set else family.min_memory_gb
        )
        config = entry.model_dump(mode="json", exclude={"defaults", "validation", "title", "summary"})
        config["min_memory_gb"] = min_memory  # the adapter checks the budget with what the catalog shows
        return ModelSpec(
            id=model_id,
            task=task,  # type: ignore[arg-type]
            title=entry.title or family.title,
            summary=entry.summary or family.summary,
            maturity=entry.maturity,
            params=params,
            adapter=family.adapter,
            inputs=("image", "audio") if task == "audio2video" else (),
            cards=entry.cards,
            devices=tuple(entry.devices or family.devices),
            requires=family.requires,
            execution_mode=execution_mode,
            previews=family.previews,
            validation=policy,
            timeout_seconds=entry.timeout,
            retry_on_validation_failure=entry.retry_on_validation_failure,
            backend=entry.backend,
            config=config,
            min_memory_gb=min_memory,
            memory_scope=entry.memory_scope,
            load_seconds=entry.load_seconds,
            seconds_per_output_second=entry.seconds_per_output_second,
            required_paths=tuple(entry.required_paths()),
        )

    def _check_groups(self) -> None:
        builtin = {spec.id for spec in reference_specs()} if self.reference_models else set()
        known = set(self._specs) | builtin
        for task, model_id in self.data.default_models.items():
            if model_id not in known:
                raise self._fail(f"default_models.{task}", f"'{model_id}' is not an enabled model")
            spec = self._specs.get(model_id)
            if spec is not None and spec.task != task:
                raise self._fail(f"default_models.{task}", f"'{model_id}' performs {spec.task}")
        owned: dict[tuple[str, int], str] = {}
        for index, group in enumerate(self.data.workers):
            where = f"workers[{index}] ({group.devices})"
            for model_id in group.models:
                if model_id not in known:
                    raise self._fail(f"{where}.models", f"'{model_id}' is not an enabled model")
                spec = self._specs.get(model_id)
                if spec is not None and spec.cards > group.card_count:
                    raise self._fail(
                        f"{where}.models",
                        f"'{model_id}' needs {spec.cards} cards, the group has {group.card_count}",
                    )
            for card in group.cards:
                if card in owned:
                    raise self._fail(f"{where}.devices", f"{card[0]}:{card[1]} is also in {owned[card]}")
                owned[card] = group.devices
            resolved: dict[str, dict[str, Any]] = {}
            for model_id, override in group.config.items():
                if model_id not in self._specs:
                    raise self._fail(f"{where}.config", f"'{model_id}' is not an enabled model")
                merged = {**self.data.models[model_id].model_dump(mode="json"), **override}
                try:
                    entry = parse_entry(model_id, merged, base_dir=self.source.parent)
                except ValidationError as exc:
                    raise self._fail(f"{where}.config.{model_id}", _first_error(exc)) from None
                dumped = entry.model_dump(mode="json")
                resolved[model_id] = {key: dumped[key] for key in override}
            self._overrides.append(resolved)


def _first_error(exc: ValidationError) -> str:
    return config_problem(exc.errors(include_url=False)[0], tag_at=0)


def _read(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".toml":
        return tomllib.loads(text)
    data = yaml.safe_load(text)
    return data if data is not None else {}


def load_deployment(path: Path | str) -> Deployment:
    """Read and validate a deployment file; raises DeploymentError naming the file and key."""
    source = Path(path).expanduser().resolve()
    try:
        raw = _read(source)
    except FileNotFoundError:
        raise DeploymentError(f"{source}: no such deployment file (JOBSERVICE_DEPLOYMENT_FILE)") from None
    except (OSError, yaml.YAMLError, tomllib.TOMLDecodeError, ValueError) as exc:
        raise DeploymentError(f"{source}: cannot read it: {exc}") from None
    if not isinstance(raw, dict):
        raise DeploymentError(f"{source}: the top level must be a mapping with models: and workers:")
    try:
        data = DeploymentFile.model_validate(raw, context={"base_dir": source.parent})
    except ValidationError as exc:
        problems = [config_problem(err, tag_at=2) for err in exc.errors(include_url=False)]
        more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:4])})" if len(problems) > 1 else ""
        raise DeploymentError(f"{source}: {problems[0]}{more}") from None
    return Deployment(data, source=source)


def default_catalog() -> Catalog:
    """The built-in catalog: the two reference models."""
    return Catalog(reference_specs())


def build_catalog(extra: list[str] | None = None, *, deployment_file: Path | None = None) -> Catalog:
    """The built-in models, those of a deployment file, and those of each ``module:function`` in ``extra``."""
    specs = reference_specs()
    defaults: dict[str, str] = {}
    groups: list[WorkerGroup] = []
    if deployment_file is not None:
        deployment = load_deployment(deployment_file)
        if not deployment.reference_models:
            specs = []
        specs.extend(deployment.specs())
        defaults = deployment.default_models()
        groups = deployment.worker_groups()
    for ref in extra or []:
        module_name, _, function = ref.partition(":")
        provider = getattr(importlib.import_module(module_name), function or "specs")
        specs.extend(provider())
    return Catalog(specs, defaults=defaults, groups=groups)
