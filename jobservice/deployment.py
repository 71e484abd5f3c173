"""Deployment files: which real models a site enables, where they live, and which cards run them.

A YAML or TOML file named by ``JOBSERVICE_DEPLOYMENT_FILE`` and read by the catalog builder, so
the API and every worker see the same catalog. It is validated as a whole when it is read; any
error names the file and the bad key (``models.soulx-flashhead-1.3b.launcher: ...``). Relative
paths resolve against the file's folder. Whether the paths exist is NOT checked here: the API
host rarely has the checkouts; the worker that would run a model checks them
(``ModelSpec.required_paths``) and skips the model with the reason.

The schema of each back end's entry lives in ``jobservice.deployment_schema``; this module loads
files and turns entries into catalog specs.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from jobservice.catalog import ModelSpec, ValidationPolicy, WorkerGroup
from jobservice.deployment_schema import (
    BACKENDS,
    DeploymentFile,
    DiffusersEntry,
    Entry,
    FlashHeadEntry,
    FlashTalkEntry,
    OmniRTEntry,
    VllmOmniEntry,
    with_known_backend,
)
from jobservice.model_params import (
    DiffusersWanParams,
    FlashHeadParams,
    FlashTalkParams,
    OmniRTAudioParams,
    OmniRTTextParams,
    VllmWanParams,
    with_defaults,
)

__all__ = ["Deployment", "DeploymentError", "load_deployment", "parse_entry"]


class DeploymentError(ValueError):
    """A deployment file that cannot be used; the message names the file and the bad key."""


@dataclass(frozen=True)
class _Family:
    """What every model of one back end shares."""

    adapter: str
    task: str
    title: str
    summary: str
    execution_mode: str
    devices: tuple[str, ...]
    requires: tuple[str, ...]
    min_memory_gb: float | None
    policy: ValidationPolicy


# Validation policies, and why they differ from the default:
# - FlashHead generates whole 28-frame slices, pads the last one with silence and muxes with
#   ``ffmpeg -c:v copy -shortest``; with stream copy -shortest stops on packet boundaries, so
#   the video can run a few frames past the audio (and AAC ends on 1024-sample frames).
# - FlashTalk through our resident worker: we trim the padded last chunk and mux ourselves, so
#   the default (exact) tolerances hold.
# - OmniRT runs many models with their own muxing (FlashTalk's script truncates the last partial
#   slice, up to 28 frames = 1.12 s); a deployment can tighten this per model.
FAMILIES: dict[str, _Family] = {
    "flashhead": _Family(
        adapter="workers.adapters.flashhead:FlashHeadAdapter",
        task="audio2video",
        title="SoulX-FlashHead 1.3B",
        summary="SoulX-FlashHead's generate_video.py run per job (python or torchrun over the worker's "
        "cards): 512x512, 25 fps, the audio's duration.",
        execution_mode="subprocess",
        devices=("cuda", "npu"),
        requires=(),
        min_memory_gb=48.0,  # OmniRT's resource_hint for 910B2, aggregate over the cards
        policy=ValidationPolicy(frame_tolerance=4, duration_tolerance_seconds=0.2),
    ),
    "flashtalk": _Family(
        adapter="workers.adapters.flashtalk:FlashTalkAdapter",
        task="audio2video",
        title="SoulX-FlashTalk 14B",
        summary="SoulX-FlashTalk kept loaded in a resident worker per card group and fed chunk by chunk; "
        "presets: realtime (704x416, 29/1 frames, 2 steps) and quality.",
        execution_mode="persistent_worker",
        devices=("cuda", "npu"),
        requires=(),
        min_memory_gb=64.0,  # OmniRT's resource_hint, aggregate
        policy=ValidationPolicy(),
    ),
    "omnirt": _Family(
        adapter="workers.adapters.omnirt:OmniRTAdapter",
        task="audio2video",
        title="OmniRT",
        summary="Any OmniRT model (wav2lip, quicktalk, musetalk, FlashHead...) through `python -m omnirt "
        "generate --json` or a running `omnirt serve`.",
        execution_mode="subprocess",
        devices=("cpu", "cuda", "npu"),
        requires=(),
        min_memory_gb=None,
        policy=ValidationPolicy(frame_tolerance=2, duration_tolerance_seconds=1.2),
    ),
    "vllm-omni": _Family(
        adapter="workers.adapters.vllm_omni:VllmOmniAdapter",
        task="text2video",
        title="Wan2.1 T2V 1.3B on vLLM-Omni",
        summary="Wan2.1 text2video served by a pool of vLLM-Omni instances (one job at a time each).",
        execution_mode="http",
        devices=("cpu", "cuda", "npu"),
        requires=("requests",),
        min_memory_gb=None,  # the server owns the cards; it reports its own peak memory
        policy=ValidationPolicy(),
    ),
    "diffusers": _Family(
        adapter="workers.adapters.diffusers_wan:DiffusersWanAdapter",
        task="text2video",
        title="Wan2.1 T2V (diffusers)",
        summary="Wan2.1 text2video from a local diffusers folder (WanPipeline) on the worker's device.",
        execution_mode="resident",
        devices=("cpu", "cuda", "npu"),
        requires=("torch", "numpy", "diffusers", "transformers", "accelerate"),
        min_memory_gb=None,
        policy=ValidationPolicy(),
    ),
}
assert set(FAMILIES) == set(BACKENDS)
_ENTRY: TypeAdapter[Entry] = TypeAdapter(Entry)


def parse_entry(model_id: str, raw: dict[str, Any], *, base_dir: Path | None = None) -> Entry:
    """Validate one model entry (workers read ``ModelSpec.config`` back with it)."""
    context = {"base_dir": base_dir} if base_dir is not None else None
    return _ENTRY.validate_python(with_known_backend(model_id, raw), context=context)


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
            WorkerGroup(devices=g.devices, models=tuple(g.models), name=g.name, config=overrides)
            for g, overrides in zip(self.data.workers, self._overrides, strict=True)
        ]

    def _fail(self, where: str, message: str) -> DeploymentError:
        return DeploymentError(f"{self.source}: {where}: {message}")

    def _spec(self, model_id: str, entry: Entry) -> ModelSpec:
        family = FAMILIES[entry.backend]
        task = entry.task or family.task
        try:
            params = with_defaults(
                _params_class(entry, task),
                entry.defaults,
                model_id=model_id,
                allowed_models=entry.models if isinstance(entry, OmniRTEntry) else None,
            )
        except ValueError as exc:
            raise self._fail(f"models.{model_id}", str(exc)) from None
        try:
            policy = ValidationPolicy.model_validate({**family.policy.model_dump(), **entry.validation})
        except ValidationError as exc:
            raise self._fail(f"models.{model_id}.validation", _first_error(exc)) from None
        execution_mode = family.execution_mode
        min_memory = (
            entry.min_memory_gb if "min_memory_gb" in entry.model_fields_set else family.min_memory_gb
        )
        config = entry.model_dump(mode="json", exclude={"defaults", "validation", "title", "summary"})
        config["min_memory_gb"] = min_memory  # the adapter checks the budget with what the catalog shows
        if isinstance(entry, OmniRTEntry) and entry.mode == "server":
            execution_mode = "http"
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
            validation=policy,
            timeout_seconds=entry.timeout,
            backend=entry.backend,
            config=config,
            min_memory_gb=min_memory,
            memory_scope=entry.memory_scope,
            required_paths=tuple(entry.required_paths()),
        )

    def _check_groups(self) -> None:
        from jobservice.catalog import default_catalog

        known = set(self._specs) | (set(default_catalog().ids()) if self.reference_models else set())
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


def _params_class(entry: Entry, task: str) -> type:
    if isinstance(entry, FlashHeadEntry):
        return FlashHeadParams
    if isinstance(entry, FlashTalkEntry):
        return FlashTalkParams
    if isinstance(entry, VllmOmniEntry):
        return VllmWanParams
    if isinstance(entry, DiffusersEntry):
        return DiffusersWanParams
    return OmniRTTextParams if task == "text2video" else OmniRTAudioParams


def _first_error(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    parts = list(err["loc"])
    if parts and parts[0] in BACKENDS:  # the discriminator's tag, not a key of the file
        parts = parts[1:]
    loc = ".".join(str(p) for p in parts)
    return f"{loc}: {err['msg']}" if loc else err["msg"]


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
    except (OSError, yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise DeploymentError(f"{source}: cannot read it: {exc}") from None
    if not isinstance(raw, dict):
        raise DeploymentError(f"{source}: the top level must be a mapping with models: and workers:")
    try:
        data = DeploymentFile.model_validate(raw, context={"base_dir": source.parent})
    except ValidationError as exc:
        problems = [_format(err) for err in exc.errors(include_url=False)]
        more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:4])})" if len(problems) > 1 else ""
        raise DeploymentError(f"{source}: {problems[0]}{more}") from None
    return Deployment(data, source=source)


def _format(err: Any) -> str:
    # Drop the discriminator's tag from the location: "models.x.flashhead.launcher" -> "models.x.launcher".
    parts = list(err["loc"])
    if len(parts) >= 3 and parts[0] == "models" and parts[2] in BACKENDS:
        del parts[2]
    loc = ".".join(str(p) for p in parts)
    return f"{loc}: {err['msg']}" if loc else err["msg"]
