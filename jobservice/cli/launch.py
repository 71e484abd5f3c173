"""Launching the long-running processes: the API under gunicorn, a worker pinned to its cards."""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
from typing import Any

from jobservice.broker import group_queue
from jobservice.catalog import WorkerGroup
from jobservice.fleet.placement import (
    DeviceContext,
    DeviceSpecError,
    parse_devices,
    path_exists,
    pinning_env,
    servable_models,
)
from jobservice.logs import install_on
from jobservice.settings import Settings
from jobservice.wiring import build_services

log = logging.getLogger(__name__)


def serve_api(settings: Settings, *, host: str, port: int, workers: int, threads: int) -> None:
    """Run the API under gunicorn's gthread worker (slow uploads don't time out a sync worker)."""
    from gunicorn.app.base import BaseApplication
    from gunicorn.glogging import Logger

    from jobservice.metrics.process import prepare_multiprocess, process_exited

    prepare_multiprocess()  # /metrics sums every worker process: before the app makes a metric
    from jobservice.http.app import create_app

    class _OurFormat(Logger):
        """gunicorn's logger with our format from its first line (the master's start-up too)."""

        def setup(self, cfg: Any) -> None:
            super().setup(cfg)
            for log_ in (self.error_log, self.access_log):
                for handler in log_.handlers:
                    install_on(handler, settings.log_format)

        def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
            # A line per poll from hundreds of clients cost 15% of GET /jobs/<id>'s CPU
            # (scripts/bench_poll.py); "changes" keeps every write and every refusal.
            if settings.api_access_log == "changes" and _successful_read(req.method, resp.status_code):
                return
            super().access(resp, req, environ, request_time)

    class _Gunicorn(BaseApplication):
        def load_config(self) -> None:
            options = {
                "bind": f"{host}:{port}",
                "workers": workers,
                "worker_class": "gthread",
                "threads": threads,
                # gunicorn has no timeout for a request body that trickles in: a proxy in front should
                # buffer bodies and time out slow clients (docs/security.md). These bound the rest.
                "timeout": 120,  # a worker silent this long is restarted
                "graceful_timeout": 20,
                "keepalive": 5,  # seconds an idle keep-alive connection is kept
                "limit_request_line": 4094,  # method + path + query: our longest is a cursor (~100 B)
                "limit_request_fields": 50,
                "limit_request_field_size": 8190,
                # Recycle workers now and then (staggered by the jitter); at 10,000 a polled process
                # restarted every few seconds under load (scripts/bench_poll.py).
                "max_requests": 200_000,
                "max_requests_jitter": 20_000,
                "accesslog": None if settings.api_access_log == "off" else "-",
                "errorlog": "-",
                "loglevel": settings.log_level.lower(),
                "proc_name": "jobservice-api",
                "logger_class": _OurFormat,
                "child_exit": lambda _server, worker: process_exited(worker.pid),
            }
            for key, value in options.items():
                self.cfg.set(key, value)

        def load(self) -> Any:
            # The app sizes its live-stream limit by the threads it really has (--threads).
            return create_app(settings.model_copy(update={"api_threads": threads}))

    _Gunicorn().run()


def _successful_read(method: str, status: int | None) -> bool:
    """Whether a request only read something and succeeded (its access line may be skipped)."""
    return method in {"GET", "HEAD", "OPTIONS"} and status is not None and status < 400


def worker_plan(
    settings: Settings, device: DeviceContext, models: list[str] | None, name: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """The models this worker may serve (its group's eligible models), and why the others are skipped.
    ``name``: the deployment file's group, by its name or its devices as the file writes them."""
    catalog = build_services(settings).catalog
    group = catalog.group_for(device.label, name)
    if not models and group is not None:
        models = list(group.models)  # the deployment file's card group on exactly these devices
    if models:
        unknown = [m for m in models if catalog.get(m) is None]
        if unknown:
            raise SystemExit(f"unknown model(s): {', '.join(unknown)}; known: {', '.join(catalog.ids())}")
    reasons = servable_models(catalog, device, models)
    serve = [model for model, why in reasons.items() if why is None]
    skipped = {model: why for model, why in reasons.items() if why is not None}
    return serve, skipped


def _say_skipped(settings: Settings, device: DeviceContext, skipped: dict[str, str]) -> None:
    """Tell the operator which models this worker will not serve, and the missing paths."""
    catalog = build_services(settings).catalog
    for model, why in skipped.items():
        log.warning("worker %s: not serving %s: %s", device.label, model, why)
        spec = catalog.get(model)
        for name, path in spec.required_paths if spec else ():
            if not path_exists(path):  # the paths go to this operator's terminal, never to the API
                log.warning("worker %s:     %s = %s (missing)", device.label, name, path)


def deployment_group(settings: Settings, device: DeviceContext, key: str | None) -> WorkerGroup | None:
    """The deployment file's card group a worker on ``device`` runs: the one named ``key`` or written
    ``key`` in the file's devices (``--group``; its card count must be ``device``'s), else the one
    on exactly ``device``."""
    catalog = build_services(settings).catalog
    if key is None:
        return catalog.group_for(device.label, None)
    try:
        key = parse_devices(key).label  # the file's devices, canonical ("npu:4-7" -> "npu:4,5,6,7")
    except DeviceSpecError:
        pass  # a group's name
    group = catalog.group_for(device.label, key)
    if group is None or (group.name != key and group.devices != key):
        known = ", ".join(g.name or g.devices for g in catalog.groups) or "none"
        raise SystemExit(f"--group {key}: the deployment file has no such card group (its groups: {known})")
    cards = parse_devices(group.devices).count
    if cards != device.count:
        raise SystemExit(
            f"--group {key} has {cards} card(s) but --devices {device.label} gives this worker {device.count}"
        )
    return group


def exec_worker(
    settings: Settings,
    *,
    devices: str,
    models: list[str] | None,
    name: str | None,
    preload: bool,
    loglevel: str,
    group_key: str | None = None,
    pool: str = "prefork",
) -> None:
    """Pin the environment to ``devices`` and replace this process with a Celery worker.

    The card group's id is ``name``, else ``JOBSERVICE_WORKER_NODE`` (a pod's stable name), else
    ``<devices>@<hostname>``. Its deployment-file group is ``group_key`` (by name, or by the devices
    the file gives it: a container whose cards a device plugin numbered from 0), else the one named
    ``name``, else the one on exactly ``devices``."""
    device = parse_devices(devices)
    if group_key is not None:
        group = deployment_group(settings, device, group_key)
    else:
        group = build_services(settings).catalog.group_for(device.label, name)
    key = None if group is None else (group.name or group.devices)
    serve, skipped = worker_plan(settings, device, models, key or name)
    _say_skipped(settings, device, skipped)
    if not serve:
        raise SystemExit(f"worker {device.label}: no model can be served on these devices")
    node = name or settings.worker_node or f"{device.label}@{socket.gethostname()}"
    env = dict(os.environ)
    env.update(pinning_env(device))  # before anything in the worker imports torch
    env["JOBSERVICE_WORKER_DEVICES"] = devices
    env["JOBSERVICE_WORKER_MODELS"] = json.dumps(serve)
    env["JOBSERVICE_WORKER_SKIPPED"] = json.dumps(skipped)  # shown by /models and /readyz
    env["JOBSERVICE_WORKER_NODE"] = node
    env["JOBSERVICE_WORKER_PRELOAD"] = "1" if preload else "0"
    if key is not None:
        env["JOBSERVICE_WORKER_GROUP"] = key  # its per-model config and declared memory
    # The child needs one OpenMP pool of its own; never inherit one from a parent that used torch.
    env.setdefault("PYTHONUNBUFFERED", "1")
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers.celery_worker",
        "worker",
        "--pool",
        pool,
        "--concurrency",
        "1",  # one job at a time per card group
        "--queues",
        group_queue(node),  # the dispatcher sends this group its next job here, one at a time
        "--hostname",
        node.replace("@", "-").replace(":", "_").replace(",", "_") + "@%h",
        "--loglevel",
        loglevel,
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-O",
        "fair",
    ]
    if settings.log_format == "json":
        argv.insert(argv.index("worker"), "--quiet")  # Celery's banner is not a JSON line
    log.info("worker %s: may serve %s", device.label, ", ".join(serve))
    for handler in logging.getLogger().handlers:
        handler.flush()
    os.execvpe(argv[0], argv, env)  # noqa: S606 - argv is fully ours
