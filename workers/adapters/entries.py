"""Reading a model's deployment entry back from what ``Adapter.load`` receives."""

from __future__ import annotations

from typing import Any, TypeVar

from jobservice.families.deployment import parse_entry
from workers.adapters.base import AdapterError

E = TypeVar("E")


def deployment_entry(model_id: str, params: dict[str, Any] | None, kind: type[E]) -> tuple[E, dict[str, Any]]:
    """The validated entry (as ``kind``) and the worker's ``_runtime`` facts from ``load``'s params."""
    config = dict(params or {})
    runtime = config.pop("_runtime", {}) or {}
    entry = parse_entry(model_id, config)
    if not isinstance(entry, kind):
        raise AdapterError(
            "model_load_failed",
            f"{model_id}: expected a {kind.__name__} deployment entry, got backend {entry.backend!r}",
        )
    return entry, runtime
