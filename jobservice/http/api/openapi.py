"""``/openapi.json``: the OpenAPI 3.1 description, built from the route tables and the pydantic
models the API uses.

Each route module's ``api`` (a ``jobservice.http.api.doc.RouteTable``) holds what its views read and
answer, declared on the views themselves; request and response bodies are the same pydantic models
the views parse and serialize, and every catalog model's parameters are added when the document is
built. The document's own route is declared here, so this is the one module that sees every table.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify
from pydantic import BaseModel

from jobservice import __version__
from jobservice.catalog import Catalog
from jobservice.http.api.doc import REF, RouteTable, Schema, answer
from jobservice.http.api.native import (
    batches,
    fleet,
    groups,
    jobs,
    metrics,
    quota,
    streams,
    system,
    uploads,
    webhooks,
)
from jobservice.http.api.native.batches import BATCH_MODELS
from jobservice.http.api.native.fleet import FLEET_MODELS
from jobservice.http.api.native.groups import GROUP_MODELS
from jobservice.http.api.native.quota import QUOTA_MODELS
from jobservice.http.api.native.submission import JobCreate
from jobservice.http.api.native.uploads import UPLOAD_MODELS
from jobservice.http.api.openai import videos as openai_videos
from jobservice.http.api.openai.doc import OPENAI_MODELS
from jobservice.jobs.presenters import JobView
from jobservice.jobs.views import JobDeleted
from jobservice.reports.run_report import RunReport

ERROR: Schema = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string", "description": "Machine-readable, e.g. invalid_parameters."},
                "message": {"type": "string", "description": "A sentence for people."},
                "details": {"type": "array", "items": {"type": "object"}},
            },
        }
    },
}
MODELS: tuple[type[BaseModel], ...] = (
    JobView,
    JobDeleted,
    RunReport,
    JobCreate,
    *BATCH_MODELS,
    *GROUP_MODELS,
    *QUOTA_MODELS,
    *FLEET_MODELS,
    *OPENAI_MODELS,
    *UPLOAD_MODELS,
)
bp = Blueprint("openapi", __name__)
api = RouteTable(bp)
# Every table, in the document's order.
TABLES: tuple[RouteTable, ...] = (
    jobs.api,
    uploads.api,
    system.api,
    api,
    batches.api,
    groups.api,
    quota.api,
    fleet.api,
    metrics.api,
    openai_videos.api,
    webhooks.api,
    streams.api,
)


def _define(components: dict[str, Any], name: str, schema: Schema) -> None:
    """Add ``schema`` as ``name``; a name is one schema (two models of one name, a job group's view
    and a card group's say, would otherwise have the later silently replace the earlier)."""
    if components.setdefault(name, schema) != schema:
        raise ValueError(f"two different schemas are named {name!r} in the OpenAPI components")


def _components(catalog: Catalog) -> dict[str, Any]:
    components: dict[str, Any] = {"Error": ERROR}
    for model in (*MODELS, *(spec.params for spec in catalog.all())):
        schema = model.model_json_schema(ref_template=REF)
        for name, nested in schema.pop("$defs", {}).items():
            _define(components, name, nested)
        _define(components, model.__name__, schema)
    return components


def build_openapi(catalog: Catalog) -> dict[str, Any]:
    """The whole document for ``GET /openapi.json``: every route of the tables, every model's schema."""
    paths: dict[str, dict[str, Any]] = {}
    for route in (route for table in TABLES for route in table.routes):
        paths.setdefault(route.path, {})[route.method] = route.operation(catalog)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "jobservice",
            "version": __version__,
            "description": "Queue-backed batch video jobs.",
        },
        "paths": paths,
        "components": {"schemas": _components(catalog)},
    }


@api.route("get", "/openapi.json", "This document", responses={"200": answer("OpenAPI 3.1")})
def openapi() -> Response:
    """An OpenAPI 3.1 description of this API."""
    return jsonify(build_openapi(jobs.services().catalog))
