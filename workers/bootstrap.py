"""Worker bootstrap: the Celery app, its task, and the process lifecycle hooks.

Nothing torch-, CUDA- or database-related happens in the Celery parent at import: models load
in the child that runs them, the child builds its own database engine after fork, and the
parent only runs the maintenance thread (presence + reaper) and the dispatcher thread (rounds the
API asks for). See reference/stack-probe.md 4-5.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from celery import Celery, signals

from jobservice import tracing
from jobservice.db.tables import WorkerRecord
from jobservice.fleet.placement import DeviceContext, inventory, parse_devices
from jobservice.fleet.stopping import drain_seconds
from jobservice.logs import install_on
from jobservice.retention.orphans import sweep_orphans
from jobservice.settings import Settings
from jobservice.wiring import Services, build_services
from workers import forkguard
from workers.card_group import FleetMember
from workers.card_health import CardMonitor
from workers.dispatcher import Dispatcher
from workers.finisher import Finisher
from workers.maintenance import Maintenance
from workers.runtime import WorkerRuntime, default_node, group_memory_gb, versions
from workers.tasks import register_tasks

log = logging.getLogger(__name__)
DEFAULT_DRAIN_SECONDS = 300.0  # a WorkerProcess made without its models' figure (tests)


def drain_for(services: Services) -> float:
    """How long a stopping worker waits for the job it is finishing: as long as that job may run,
    the longest limit of the models it serves (jobservice.fleet.stopping; its unit gives it more)."""
    settings = services.settings
    return drain_seconds(
        services.catalog, settings.worker_models or None, job_timeout_seconds=settings.job_timeout_seconds
    )


class WorkerProcess:
    """Holds the per-process runtime (children) and the maintenance loop (parent)."""

    def __init__(self, services: Services, *, drain_seconds: float = DEFAULT_DRAIN_SECONDS) -> None:
        self.services = services
        self.drain_seconds = drain_seconds  # ``bootstrap`` gives the one its models need (drain_for)
        self._runtime: WorkerRuntime | None = None
        self._runtime_pid = -1
        self.maintenance: Maintenance | None = None
        self.dispatcher: Dispatcher | None = None
        self.member: FleetMember | None = None  # the card group, as the main process sees it
        self._draining: threading.Thread | None = None

    def runtime(self) -> WorkerRuntime:
        """This process's runtime, built on first use (after fork in a prefork child)."""
        if self._runtime is None or self._runtime_pid != os.getpid():
            self._runtime = WorkerRuntime.create(self.services, node=self.services.settings.worker_node)
            if self.services.settings.worker_overlap_finish:
                self._runtime.finisher = Finisher()
            self._runtime_pid = os.getpid()
        return self._runtime

    def on_child_start(self, **_: Any) -> None:
        """Prefork child start: tracing (after the fork), fresh runtime (holding no model: the group's
        row says so), thread budget, optional preload."""
        tracing.init_process(self.services.settings, service="jobservice-worker")
        runtime = self.runtime()
        runtime.member.forget_residency("worker child started")
        versions()  # cached per process: keep git/ffmpeg/driver probes off the first job's tail
        settings = self.services.settings
        threads = settings.torch_threads
        if threads or settings.worker_preload:
            import torch  # noqa: PLC0415 - only in the child, never in the parent

            if threads:
                torch.set_num_threads(threads)
        if settings.worker_preload:
            for model_id in runtime.models:
                spec = self.services.catalog.get(model_id)
                if spec is None:
                    continue
                try:
                    runtime.resident.get(spec)
                except Exception:  # noqa: BLE001 - a model that fails to preload fails its jobs clearly later
                    log.exception("preloading %s failed; the other models still preload", model_id)

    def on_child_stop(self, **_: Any) -> None:
        """Prefork child exit: finish the job handed over last, then release resident models."""
        if self._runtime is not None and self._runtime_pid == os.getpid():
            self._drain_finisher()
            self._runtime.resident.unload_all()
        tracing.shutdown()  # export the last spans before the child exits

    def _drain_finisher(self) -> None:
        """Wait for the job this process is finishing, if any (workers/finisher.py)."""
        finisher = self._runtime.finisher if self._runtime is not None else None
        if finisher is not None and not finisher.drain(timeout=self.drain_seconds):
            log.warning(
                "a job was still finishing after %g s; its lease will bring it back", self.drain_seconds
            )

    def on_ready(self, **_: Any) -> None:
        """Parent set up, before the broker connection: announce the worker, start the maintenance loop."""
        settings = self.services.settings
        node = settings.worker_node
        device = parse_devices(settings.worker_devices)
        forkguard.install(self.services.db)  # before the maintenance thread's first query
        self.member = self._register_group(node or default_node(device), device)
        self.maintenance = Maintenance(
            self.services,
            worker_id=node or default_node(device),
            member=self.member,
            cards=CardMonitor(device),
            devices=device.label,
            models=settings.worker_models or self.services.catalog.ids(),
            info={
                "versions": versions(),
                "host": inventory(),
                "pid": os.getpid(),
                "pod": settings.pod_name,  # jobservice_group_info's pod label (Kubernetes)
                # Models this worker was asked for but cannot serve, with why (set by the launcher).
                "skipped": dict(settings.worker_skipped),
            },
        )
        self.maintenance.start()
        self.dispatcher = Dispatcher(self.services)  # rounds the API asks for (jobservice.fleet.wake)
        self.dispatcher.start()
        try:  # this host's leftovers of dead processes: spool, scratch, half-written store files
            with forkguard.guarded():
                sweep_orphans(self.services, store=False)
        except Exception:  # noqa: BLE001 - housekeeping must never stop a worker from starting
            log.warning("the start-up orphan sweep failed", exc_info=True)

    def _register_group(self, node: str, device: DeviceContext) -> FleetMember:
        """The card group's row: what it may serve and its memory, nothing resident, its ledger
        resumed (the time since its previous worker was last seen is ``down``)."""
        models = self.services.settings.worker_models or self.services.catalog.ids()
        member = FleetMember(
            self.services,
            group_id=node,
            device=device,
            memory_gb_per_card=group_memory_gb(self.services, device),
            eligible=models,
        )
        try:
            with forkguard.guarded(), self.services.db.session() as session:
                previous = session.get(WorkerRecord, node)
                seen = None if previous is None else previous.stopped_at or previous.last_seen_at
            with forkguard.guarded():
                member.register(last_seen=seen)
        except Exception:  # noqa: BLE001 - the first maintenance round and the first job try again
            log.warning("could not register card group %s yet", node, exc_info=True)
        return member

    def on_stopping(self, **_: Any) -> None:
        """Asked to stop (SIGTERM: Celery's warm shutdown begins): the group drains at once, on a
        thread of its own (this runs in a signal handler), while Celery finishes the running job."""
        if self.member is not None and self._draining is None:
            self._draining = threading.Thread(target=self._drain, name="jobservice-drain", daemon=True)
            self._draining.start()

    def _drain(self) -> None:
        assert self.member is not None
        with forkguard.guarded():
            self.member.drain()

    def on_shutdown(self, **_: Any) -> None:
        """Parent stopping: finish a job handed over here (the solo pool runs jobs in this process),
        then retire the presence row."""
        if self._runtime is not None and self._runtime_pid == os.getpid():
            self._drain_finisher()
        if self._draining is not None:
            self._draining.join(timeout=10)
            self._draining = None
            self._drain()  # what a round handed the group while it stopped goes back too
        if self.dispatcher is not None:
            self.dispatcher.stop()
        if self.maintenance is not None:
            self.maintenance.stop()


def bootstrap(settings: Settings | None = None) -> Celery:
    """Build the worker's Celery app from ``JOBSERVICE_*`` settings."""
    services = build_services(settings or Settings())
    app = services.celery
    process = WorkerProcess(services, drain_seconds=drain_for(services))
    # Celery's hard limit must not cut a model that a deployment file allows to run longer.
    model_limits = [spec.timeout_seconds or 0.0 for spec in services.catalog.all()]
    longest = max([services.settings.job_timeout_seconds, *model_limits])
    if longest + 120 >= services.settings.visibility_timeout_seconds:
        # Redis would re-deliver a job that runs that long while it still runs (stack-probe section 2).
        raise SystemExit(
            f"a model may run {longest:g} s but JOBSERVICE_VISIBILITY_TIMEOUT_SECONDS is "
            f"{services.settings.visibility_timeout_seconds}: raise it above the longest job"
        )
    register_tasks(app, process.runtime, hard_time_limit=longest + 120)
    fmt = services.settings.log_format

    def use_our_format(logger: logging.Logger, **_: Any) -> None:
        for handler in logger.handlers:  # Celery's handlers: our format, and the job id on each line
            install_on(handler, fmt)

    signals.after_setup_logger.connect(use_our_format, weak=False)
    signals.after_setup_task_logger.connect(use_our_format, weak=False)
    signals.worker_process_init.connect(process.on_child_start, weak=False)
    signals.worker_process_shutdown.connect(process.on_child_stop, weak=False)
    # Before the broker connection (not worker_ready): a worker started while Redis is away reaps.
    signals.celeryd_after_setup.connect(process.on_ready, weak=False)
    signals.worker_shutting_down.connect(process.on_stopping, weak=False)
    signals.worker_shutdown.connect(process.on_shutdown, weak=False)
    return app
