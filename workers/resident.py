"""Which models this worker can serve, and their resident handles.

Adapters are named in the catalog as ``module:Class`` and imported only inside the worker child
that runs them, so the Celery parent never loads torch. Which models a worker may serve is decided
without importing them (``jobservice.fleet.placement.servable_models``).
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jobservice.catalog import ModelSpec
from workers.adapters.base import Adapter, AdapterError, DeviceContext

log = logging.getLogger(__name__)


@dataclass
class Loaded:
    """A model resident in this process."""

    adapter: Adapter
    handle: Any
    load_ms: float


class ResidentModels:
    """Loads each model once per worker process and keeps it."""

    def __init__(
        self, device: DeviceContext, config_for: Callable[[ModelSpec], dict[str, Any]] | None = None
    ) -> None:
        self.device = device
        # What Adapter.load receives as ``params``: the deployment config of the model.
        self._config_for = config_for or (lambda spec: dict(spec.config))
        self._loaded: dict[str, Loaded] = {}
        self._adapters: dict[str, Adapter] = {}

    def adapter_for(self, spec: ModelSpec) -> Adapter:
        """The adapter instance for ``spec`` (imported on first use)."""
        if spec.adapter not in self._adapters:
            module_name, _, class_name = spec.adapter.partition(":")
            try:
                module = importlib.import_module(module_name)
                cls = getattr(module, class_name)
            except (ImportError, AttributeError) as exc:
                raise AdapterError(
                    "model_unavailable", f"The adapter for {spec.id} cannot be imported: {exc}"
                ) from exc
            self._adapters[spec.adapter] = cls()
        return self._adapters[spec.adapter]

    def get(self, spec: ModelSpec) -> tuple[Loaded, bool]:
        """The resident model for ``spec`` and whether this call loaded it (a cold start)."""
        loaded = self._loaded.get(spec.id)
        if loaded is not None:
            return loaded, False
        # A cold start includes importing the adapter (torch and friends load here, not at fork).
        started = time.perf_counter()
        adapter = self.adapter_for(spec)
        try:
            handle = adapter.load(self.device, self._config_for(spec))
        except AdapterError:
            raise
        except Exception as exc:  # noqa: BLE001 - any load failure is reported as such
            log.exception("loading %s failed", spec.id)
            raise AdapterError(
                "model_load_failed", f"Loading {spec.id} on {self.device.label} failed: {exc}"
            ) from exc
        loaded = Loaded(
            adapter=adapter,
            handle=handle,
            load_ms=(time.perf_counter() - started) * 1000,
        )
        self._loaded[spec.id] = loaded
        log.info("loaded %s on %s in %.0f ms", spec.id, self.device.label, loaded.load_ms)
        return loaded, True

    def unload_all(self) -> None:
        """Release every resident model."""
        for model_id, loaded in list(self._loaded.items()):
            try:
                loaded.adapter.unload(loaded.handle)
            except Exception:  # noqa: BLE001 - shutting down anyway
                log.warning("unloading %s failed", model_id, exc_info=True)
        self._loaded.clear()
