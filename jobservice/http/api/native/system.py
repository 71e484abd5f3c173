"""``/models``, ``/healthz`` and ``/readyz``."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, g, jsonify
from sqlalchemy import text

from jobservice import __version__
from jobservice.broker import BrokerInspector
from jobservice.fleet.presence import online_workers, stale_after, worker_view
from jobservice.http.api.doc import RouteTable, answer
from jobservice.http.api.native.jobs import services
from jobservice.quotas.disk import storage_problems

bp = Blueprint("system", __name__)
api = RouteTable(bp)


def _is_admin() -> bool:
    """Worker details (hosts, cards, errors) are for admins; /readyz answers anyone."""
    principal = g.get("principal")
    return bool(principal is not None and principal.is_admin)


def _workers() -> list[dict[str, Any]]:
    silence = stale_after(services().settings)
    with services().db.session() as session:
        return [worker_view(w) for w in online_workers(session, stale_after_seconds=silence)]


@api.route(
    "get",
    "/models",
    "The model catalog with parameter schemas and worker presence",
    responses={"200": answer("Models.")},
)
def list_models() -> Response:
    """The catalog: each model's parameter schema, defaults and limits, and whether a worker serves it."""
    try:
        workers = _workers()
    except Exception:  # noqa: BLE001 - the catalog is still useful without presence
        workers = []
    models = []
    for spec in services().catalog.all():
        serving = [w for w in workers if spec.id in w["models"]]
        entry = spec.describe()
        entry["online"] = bool(serving)
        if not _is_admin():
            models.append(entry)
            continue
        entry["workers"] = [{"id": w["id"], "devices": w["devices"]} for w in serving]
        # Workers that were asked to serve it but could not (missing checkout, too few cards...).
        entry["unavailable"] = [
            {"worker": w["id"], "devices": w["devices"], "reason": reason}
            for w in workers
            if (reason := ((w.get("info") or {}).get("skipped") or {}).get(spec.id))
        ]
        models.append(entry)
    return jsonify({"object": "list", "models": models})


@api.route("get", "/healthz", "Process up", responses={"200": answer("OK")})
def healthz() -> Response:
    """The process is up."""
    return jsonify({"ok": True})


@api.route(
    "get",
    "/readyz",
    "Database, broker and object store reachable",
    responses={"200": answer("Ready"), "503": answer("Not ready")},
)
def readyz() -> Response:
    """Database, broker and object store reachable (503 otherwise), plus the workers online."""
    checks: dict[str, dict[str, Any]] = {}
    svc = services()
    try:
        with svc.db.session() as session:
            session.execute(text("SELECT 1"))
        checks["database"] = {"ok": True, "dialect": svc.db.dialect}
    except Exception as exc:  # noqa: BLE001 - report, don't crash
        checks["database"] = {"ok": False, "error": str(exc).splitlines()[0]}
    try:
        inspector = BrokerInspector.of(svc.settings, timeout=2.0)
        try:
            inspector.ping()
        finally:
            inspector.close()
        checks["broker"] = {"ok": True}
    except Exception as exc:  # noqa: BLE001
        checks["broker"] = {
            "ok": False,
            "error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
        }
    try:
        svc.store.check()
        checks["object_store"] = {"ok": True, "backend": svc.store.backend}
    except Exception as exc:  # noqa: BLE001
        checks["object_store"] = {"ok": False, "error": str(exc).splitlines()[0]}
    workers: list[dict[str, Any]] = []
    if checks["database"]["ok"]:
        workers = _workers()
    ready = all(c["ok"] for c in checks.values())
    # Low disk does not make the service unready (reads and running jobs go on): it refuses new jobs.
    low = storage_problems(svc)
    body: dict[str, Any] = {
        "ready": ready,
        "version": __version__,
        "checks": checks,
        "workers_online": len(workers),
        "accepting_jobs": not low,
    }
    if _is_admin():
        body["workers"] = workers
        body["storage_problems"] = low  # folders and free space: for admins
    else:  # no hosts, cards, URLs or error texts for anonymous callers
        body["checks"] = {name: {"ok": check["ok"]} for name, check in checks.items()}
    response = jsonify(body)
    response.status_code = 200 if ready else 503
    return response
