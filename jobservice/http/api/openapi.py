"""The OpenAPI 3.1 description, built from the route tables and the pydantic models the API uses.

The tables (``ROUTES`` here, ``BATCH_ROUTES`` in ``jobservice.http.api.openapi_batches``) say what each
route reads and answers; request and response bodies are the same pydantic models the views
parse and serialize, and every catalog model's parameters are added when the document is built.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from jobservice import __version__
from jobservice.catalog import Catalog
from jobservice.http.api.doc import (
    REF,
    Route,
    Schema,
    answer,
    follow,
    idempotency_key,
    in_path,
    in_query,
    ref,
    refused,
)
from jobservice.http.api.fleet import FLEET_MODELS, FLEET_ROUTES
from jobservice.http.api.metrics import METRICS_ROUTES
from jobservice.http.api.openai_doc import OPENAI_MODELS, OPENAI_ROUTES
from jobservice.http.api.openapi_batches import BATCH_MODELS, BATCH_ROUTES
from jobservice.http.api.prefer import PREFER_WAIT
from jobservice.http.api.quota import QUOTA_MODELS, QUOTA_ROUTES
from jobservice.http.api.streams import STREAM_ROUTES
from jobservice.http.api.submission import JobCreate
from jobservice.http.api.webhooks import WEBHOOK_ROUTES
from jobservice.jobs.schemas import JobView
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
    RunReport,
    JobCreate,
    *BATCH_MODELS,
    *QUOTA_MODELS,
    *FLEET_MODELS,
    *OPENAI_MODELS,
)


def _job_body(catalog: Catalog) -> Schema:
    """text2video as JSON (JobCreate and one model's parameters), audio2video as multipart."""
    t2v = [ref(spec.params.__name__) for spec in catalog.all() if spec.task == "text2video"]
    audio = {"type": "string", "format": "binary", "description": "WAV, MP3, FLAC, OGG or M4A speech."}
    a2v = {
        "type": "object",
        "required": ["image", "audio"],
        "properties": {
            "task": {"const": "audio2video"},
            "model": {"type": "string", "default": "reference-talking-head"},
            "image": {"type": "string", "format": "binary", "description": "PNG, JPEG or WebP portrait."},
            "audio": audio,
        },
        "additionalProperties": {"type": "string", "description": "Model parameters (see /models)."},
    }
    return {
        "application/json": {"schema": {"allOf": [ref("JobCreate"), {"oneOf": t2v} if t2v else {}]}},
        "multipart/form-data": {"schema": a2v},
    }


JOB = "/jobs/{job_id}"
NO_JOB = refused("No such job.")
TRY = in_query(
    "try",
    {"type": "integer", "minimum": 1},
    description="An earlier try's file (a try the gate failed before the job ran again with the next "
    "seed: validation_attempts[].number); default: the current or last try's.",
)
JOB_PAGE = {
    "type": "object",
    "properties": {
        "jobs": {"type": "array", "items": ref("JobView")},
        "next_cursor": {"type": ["string", "null"]},
    },
}
LIMIT = {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}
# What a client does next with a job it submitted (links in the document, followed by the fuzzer).
JOB_LINKS = follow(
    *(("get", JOB + tail) for tail in ("", "/events", "/video", "/report", "/log")),
    ("post", JOB + "/cancel"),
    job_id="$response.body#/id",
)
ROUTES: tuple[Route, ...] = (
    Route(
        "post",
        "/jobs",
        "Submit a job",
        parameters=(idempotency_key({"type": "string", "maxLength": 255}), PREFER_WAIT),
        body=_job_body,
        responses={
            "202": {**answer("Accepted; poll the Location.", "JobView"), **JOB_LINKS},
            "200": {**answer("Idempotent replay of an earlier submission.", "JobView"), **JOB_LINKS},
            "400": refused("Malformed request."),
            "404": refused("Unknown model."),
            "409": refused("Idempotency-Key reused for a different request."),
            "413": refused("Upload too large."),
            "415": refused("Unsupported content or file type."),
            "422": refused("Invalid parameters or input files."),
            "503": refused("A dependency is unavailable."),
            "507": refused("Too little free space in the store or spool (insufficient_storage)."),
        },
    ),
    Route(
        "get",
        "/jobs",
        "List jobs, newest first",
        parameters=(
            in_query("status", description="Comma-separated."),
            in_query("model"),
            in_query("limit", LIMIT),
            in_query("cursor"),
        ),
        responses={
            "200": {"description": "A page of jobs.", "content": {"application/json": {"schema": JOB_PAGE}}},
            "400": refused("A cursor this API did not make (invalid_cursor)."),
            "422": refused("Bad filter or limit."),
        },
    ),
    Route(
        "get",
        JOB,
        "A job",
        parameters=(in_path("job_id"), PREFER_WAIT),
        responses={"200": answer("The job.", "JobView"), "404": NO_JOB},
    ),
    Route(
        "post",
        JOB + "/cancel",
        "Cancel a job (queued: at once; running: at the next step or chunk)",
        parameters=(in_path("job_id"),),
        responses={
            "202": answer("Canceled or cancel requested.", "JobView"),
            "404": NO_JOB,
            "409": refused("Already finished."),
        },
    ),
    Route(
        "get",
        JOB + "/events",
        "A job's transitions",
        parameters=(in_path("job_id"),),
        responses={"200": answer("Events."), "404": NO_JOB},
    ),
    Route(
        "get",
        JOB + "/video",
        "The output video (Range requests locally; 302 to a presigned URL on S3)",
        parameters=(in_path("job_id"), in_query("download", {"type": "boolean"}), TRY),
        responses={
            "200": {"description": "MP4", "content": {"video/mp4": {}}},
            "206": {"description": "Partial content", "content": {"video/mp4": {}}},
            "302": answer("Redirect to a presigned URL"),
            "404": refused("No video yet."),
            "410": refused("Its files were deleted by retention (expired)."),
        },
    ),
    Route(
        "get",
        JOB + "/report",
        "The RunReport",
        parameters=(in_path("job_id"), TRY),
        responses={
            "200": answer("RunReport", "RunReport"),
            "404": refused("No report yet."),
            "410": refused("Its files were deleted by retention (expired)."),
            "503": refused("The object store is unavailable."),
        },
    ),
    Route(
        "get",
        JOB + "/log",
        "The run's log: the worker's notes and the model process's stdout/stderr",
        parameters=(in_path("job_id"), TRY),
        responses={
            "200": {"description": "Plain text.", "content": {"text/plain": {"schema": {"type": "string"}}}},
            "404": refused("No log yet, or the run kept none."),
            "410": refused("Its files were deleted by retention (expired)."),
            "503": refused("The object store is unavailable."),
        },
    ),
    Route(
        "get",
        "/models",
        "The model catalog with parameter schemas and worker presence",
        responses={"200": answer("Models.")},
    ),
    Route("get", "/healthz", "Process up", responses={"200": answer("OK")}),
    Route(
        "get",
        "/readyz",
        "Database, broker and object store reachable",
        responses={"200": answer("Ready"), "503": answer("Not ready")},
    ),
    Route("get", "/openapi.json", "This document", responses={"200": answer("OpenAPI 3.1")}),
)


def _components(catalog: Catalog) -> dict[str, Any]:
    components: dict[str, Any] = {"Error": ERROR}
    for model in (*MODELS, *(spec.params for spec in catalog.all())):
        schema = model.model_json_schema(ref_template=REF)
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
    return components


def build_openapi(catalog: Catalog) -> dict[str, Any]:
    """The whole document for ``GET /openapi.json``: every route of the tables, every model's schema."""
    paths: dict[str, dict[str, Any]] = {}
    for route in (
        *ROUTES,
        *BATCH_ROUTES,
        *QUOTA_ROUTES,
        *FLEET_ROUTES,
        *METRICS_ROUTES,
        *OPENAI_ROUTES,
        *WEBHOOK_ROUTES,
        *STREAM_ROUTES,
    ):
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
