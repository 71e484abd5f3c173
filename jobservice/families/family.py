"""What a model family is on the API side, and the registry every family module adds itself to."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jobservice.catalog import ModelParams, ValidationPolicy
from jobservice.families.entry import EntryBase


def _same_mode(_entry: Any, default: str) -> str:
    return default


@dataclass(frozen=True)
class Family:
    """One back end: its deployment entry, its parameters, its adapter and how its output is judged."""

    name: str  # the deployment file's ``backend:`` value
    entry: type[EntryBase]  # the pydantic model of its deployment entry
    params: Callable[[Any, str], type[ModelParams]]  # (entry, task) -> the parameter model
    adapter: str  # "module:Class" under workers.adapters, imported only by workers
    task: str
    title: str
    summary: str
    execution_mode: str
    devices: tuple[str, ...]
    # Its adapter streams frames (chunks) through the pipeline, so running jobs publish previews;
    # False: it hands over its video only once it is finished (ModelSpec.previews).
    previews: bool = False
    requires: tuple[str, ...] = ()
    min_memory_gb: float | None = None
    policy: ValidationPolicy = field(default_factory=ValidationPolicy)
    # Model ids whose entry may leave out ``backend:`` (they can only be this family).
    known_models: tuple[str, ...] = ()
    # The execution mode of one entry, when an option changes it (OmniRT's server mode).
    mode_of: Callable[[Any, str], str] = _same_mode
    # The model ids an entry offers through its ``omnirt_model``-like choice (None: no choice).
    offered_models: Callable[[Any], list[str] | None] = lambda _entry: None


FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add ``family`` to the registry (each family module calls this once, on import)."""
    if family.name in FAMILIES:
        raise ValueError(f"model family '{family.name}' is registered twice")
    backend = family.entry.model_fields.get("backend")
    if backend is None or getattr(backend.annotation, "__args__", None) != (family.name,):
        raise ValueError(f"{family.entry.__name__}.backend must be Literal['{family.name}']")
    FAMILIES[family.name] = family
    return family


def config_problem(err: Mapping[str, Any], *, tag_at: int | None = None) -> str:
    """One pydantic problem of a deployment file as ``loc: message``.

    ``tag_at``: where pydantic put the family's tag of a discriminated entry, dropped because it is
    not a key of the file ("models.x.flashhead.launcher" -> "models.x.launcher").
    """
    parts = list(err["loc"])
    if tag_at is not None and len(parts) > tag_at and parts[tag_at] in FAMILIES:
        del parts[tag_at]
    loc = ".".join(str(p) for p in parts)
    return f"{loc}: {err['msg']}" if loc else str(err["msg"])


def known_backend(model_id: str) -> str | None:
    """The family of a well-known model id (its entry may omit ``backend:``), if any."""
    for family in FAMILIES.values():
        if model_id in family.known_models:
            return family.name
    return None
