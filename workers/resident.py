"""The models this worker process holds, loaded and unloaded as its group's residency demands.

Adapters are named in the catalog as ``module:Class`` and imported only inside the worker child
that runs them, so the Celery parent never loads torch. Which models a worker may serve is decided
without importing them (``jobservice.fleet.placement.servable_models``); which of them it holds at a
time is the fleet's decision: before a model is loaded (or a per-run model is started), whatever
does not fit beside it in the cards' memory is unloaded first, cleanly (the adapter's ``unload``
stops its resident children, then the allocator's cache is returned): the models the dispatcher
decided to evict (the job's message carries its decision; ``workers.card_group.FleetMember.evictions``).
A group without declared memory keeps all.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from jobservice.catalog import ModelSpec
from jobservice.fleet import costs
from jobservice.fleet.policy import Resident
from workers.adapters.base import Adapter, AdapterError, DeviceContext
from workers.adapters.processes.memory import release_cached_memory
from workers.card_group import FleetMember

log = logging.getLogger(__name__)


@dataclass
class Loaded:
    """A model's handle in this process: resident, or (per-run) only its settings."""

    adapter: Adapter
    handle: Any
    load_ms: float
    per_run: bool = False
    since: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.time)


class ResidentModels:
    """See the module docstring. ``member`` is the worker's group in the fleet (None: no fleet
    bookkeeping, every model kept, as in tests of a single adapter)."""

    def __init__(
        self,
        device: DeviceContext,
        config_for: Callable[[ModelSpec], dict[str, Any]] | None = None,
        *,
        member: FleetMember | None = None,
    ) -> None:
        self.device = device
        # What Adapter.load receives as ``params``: the deployment config of the model.
        self._config_for = config_for or (lambda spec: dict(spec.config))
        self._loaded: dict[str, Loaded] = {}
        self._adapters: dict[str, Adapter] = {}
        self.member = member

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

    def held(self) -> dict[str, Resident]:
        """The models resident on the cards (per-run handles hold nothing there)."""
        return {
            m: Resident(since=loaded.since, last_used=loaded.last_used)
            for m, loaded in self._loaded.items()
            if not loaded.per_run
        }

    def get(
        self, spec: ModelSpec, *, job_id: uuid.UUID | None = None, evict: tuple[str, ...] | None = None
    ) -> tuple[Loaded, bool]:
        """The handle for ``spec`` and whether this call loaded it (a cold start), after making
        room for it in the cards' memory: ``evict`` is what the dispatcher decided to unload first
        (None: no decision, as for a preload; the least recently used go first)."""
        loaded = self._loaded.get(spec.id)
        victims = self.member.evictions(spec, self.held(), decided=evict) if self.member is not None else ()
        if loaded is not None and not victims:
            loaded.last_used = time.time()
            if self.member is not None:
                self.member.holds(self.held())
            return loaded, False
        with self._loading(spec, job_id):
            self._evict(victims, for_model=spec.id, job_id=job_id)
            if loaded is not None:  # a per-run model that needed room
                loaded.last_used = time.time()
                return loaded, False
            return self._load(spec, job_id), True

    def _load(self, spec: ModelSpec, job_id: uuid.UUID | None) -> Loaded:
        # A cold start includes importing the adapter (torch and friends load here, not at fork).
        started = time.perf_counter()
        adapter = self.adapter_for(spec)
        try:
            handle = adapter.load(self.device, self._config_for(spec))
        except Exception as exc:  # noqa: BLE001 - any load failure is reported as such
            if self.member is not None:
                self.member.load_failed(spec, reason=str(exc), job_id=job_id)
            if isinstance(exc, AdapterError):
                raise
            log.exception("loading %s failed", spec.id)
            raise AdapterError(
                "model_load_failed", f"Loading {spec.id} on {self.device.label} failed: {exc}"
            ) from exc
        loaded = Loaded(
            adapter=adapter,
            handle=handle,
            load_ms=(time.perf_counter() - started) * 1000,
            per_run=costs.per_run(spec),
        )
        self._loaded[spec.id] = loaded
        log.info("loaded %s on %s in %.0f ms", spec.id, self.device.label, loaded.load_ms)
        if self.member is not None and not adapter.loads_in_run:
            self.member.loaded(spec, seconds=loaded.load_ms / 1000, job_id=job_id, reason="job")
        return loaded

    @contextlib.contextmanager
    def _loading(self, spec: ModelSpec, job_id: uuid.UUID | None) -> Iterator[None]:
        if self.member is None or job_id is None:
            yield
            return
        with self.member.clock.loading(job_id, spec.id):
            yield

    def _evict(self, models: tuple[str, ...], *, for_model: str, job_id: uuid.UUID | None) -> None:
        """Unload ``models`` and give their memory back before anything else loads."""
        if not models:
            return
        for model in models:
            loaded = self._loaded.pop(model, None)
            if loaded is None:
                continue
            try:
                loaded.adapter.unload(loaded.handle)
            except Exception:  # noqa: BLE001 - the handle is dropped either way
                log.warning("unloading %s failed; dropping it", model, exc_info=True)
            log.info("evicted %s from %s to make room for %s", model, self.device.label, for_model)
        gc.collect()
        release_cached_memory(self.device)
        if self.member is not None:
            self.member.evicted(models, for_model=for_model, job_id=job_id)

    def unload_all(self) -> None:
        """Release every resident model."""
        for model_id, loaded in list(self._loaded.items()):
            try:
                loaded.adapter.unload(loaded.handle)
            except Exception:  # noqa: BLE001 - shutting down anyway
                log.warning("unloading %s failed", model_id, exc_info=True)
        self._loaded.clear()
