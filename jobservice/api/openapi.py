"""The OpenAPI 3.1 description, with schemas generated from the same pydantic models the API uses."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from jobservice import __version__
from jobservice.batches.openapi import batch_paths
from jobservice.catalog import Catalog
from jobservice.report import RunReport
from jobservice.views import JobView

REF = "#/components/schemas/{model}"


def _schema(model: type[BaseModel], components: dict[str, Any]) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template=REF)
    components.update(schema.pop("$defs", {}))
    components[model.__name__] = schema
    return {"$ref": REF.format(model=model.__name__)}


def _error_response(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": REF.format(model="Error")}}},
    }


def _job_response(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": REF.format(model="JobView")}}},
    }


def build_openapi(catalog: Catalog) -> dict[str, Any]:
    """The whole document for ``GET /openapi.json``."""
    components: dict[str, Any] = {
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {
                        "code": {
                            "type": "string",
                            "description": "Machine-readable, e.g. invalid_parameters.",
                        },
                        "message": {"type": "string", "description": "A sentence for people."},
                        "details": {"type": "array", "items": {"type": "object"}},
                    },
                }
            },
        }
    }
    _schema(JobView, components)
    _schema(RunReport, components)
    t2v_refs: list[dict[str, Any]] = []
    a2v_refs: list[dict[str, Any]] = []
    for spec in catalog.all():
        ref = _schema(spec.params, components)
        (t2v_refs if spec.task == "text2video" else a2v_refs).append(ref)
    id_param = {
        "name": "job_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "format": "uuid"},
    }
    not_found = _error_response("No such job.")
    t2v_body = {
        "allOf": [
            {
                "type": "object",
                "properties": {
                    "task": {"const": "text2video"},
                    "model": {"type": "string", "default": "reference-t2v"},
                },
            },
            {"oneOf": t2v_refs} if t2v_refs else {},
        ]
    }
    a2v_body = {
        "type": "object",
        "required": ["image", "audio"],
        "properties": {
            "task": {"const": "audio2video"},
            "model": {"type": "string", "default": "reference-talking-head"},
            "image": {"type": "string", "format": "binary", "description": "PNG, JPEG or WebP portrait."},
            "audio": {
                "type": "string",
                "format": "binary",
                "description": "WAV, MP3, FLAC, OGG or M4A speech.",
            },
        },
        "additionalProperties": {"type": "string", "description": "Model parameters (see /models)."},
    }
    paths: dict[str, Any] = {
        "/jobs": {
            "post": {
                "summary": "Submit a job",
                "parameters": [
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string", "maxLength": 255},
                    }
                ],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": t2v_body},
                        "multipart/form-data": {"schema": a2v_body},
                    },
                },
                "responses": {
                    "202": _job_response("Accepted; poll the Location."),
                    "200": _job_response("Idempotent replay of an earlier submission."),
                    "400": _error_response("Malformed request."),
                    "404": _error_response("Unknown model."),
                    "409": _error_response("Idempotency-Key reused for a different request."),
                    "413": _error_response("Upload too large."),
                    "415": _error_response("Unsupported content or file type."),
                    "422": _error_response("Invalid parameters or input files."),
                    "503": _error_response("A dependency is unavailable."),
                },
            },
            "get": {
                "summary": "List jobs, newest first",
                "parameters": [
                    {
                        "name": "status",
                        "in": "query",
                        "schema": {"type": "string"},
                        "description": "Comma-separated.",
                    },
                    {"name": "model", "in": "query", "schema": {"type": "string"}},
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
                    },
                    {"name": "cursor", "in": "query", "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": {
                        "description": "A page of jobs.",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {
                                        "jobs": {
                                            "type": "array",
                                            "items": {"$ref": REF.format(model="JobView")},
                                        },
                                        "next_cursor": {"type": ["string", "null"]},
                                    },
                                }
                            }
                        },
                    },
                    "422": _error_response("Bad filter or limit."),
                },
            },
        },
        "/jobs/{job_id}": {
            "get": {
                "summary": "A job",
                "parameters": [id_param],
                "responses": {"200": _job_response("The job."), "404": not_found},
            }
        },
        "/jobs/{job_id}/cancel": {
            "post": {
                "summary": "Cancel a job (queued: at once; running: at the next step or chunk)",
                "parameters": [id_param],
                "responses": {
                    "202": _job_response("Canceled or cancel requested."),
                    "404": not_found,
                    "409": _error_response("Already finished."),
                },
            }
        },
        "/jobs/{job_id}/events": {
            "get": {
                "summary": "A job's transitions",
                "parameters": [id_param],
                "responses": {"200": {"description": "Events."}, "404": not_found},
            }
        },
        "/jobs/{job_id}/video": {
            "get": {
                "summary": "The output video (Range requests locally; 302 to a presigned URL on S3)",
                "parameters": [id_param, {"name": "download", "in": "query", "schema": {"type": "boolean"}}],
                "responses": {
                    "200": {"description": "MP4", "content": {"video/mp4": {}}},
                    "206": {"description": "Partial content", "content": {"video/mp4": {}}},
                    "302": {"description": "Redirect to a presigned URL"},
                    "404": _error_response("No video yet."),
                },
            }
        },
        "/jobs/{job_id}/report": {
            "get": {
                "summary": "The RunReport",
                "parameters": [id_param],
                "responses": {
                    "200": {
                        "description": "RunReport",
                        "content": {"application/json": {"schema": {"$ref": REF.format(model="RunReport")}}},
                    },
                    "404": _error_response("No report yet."),
                },
            }
        },
        "/jobs/{job_id}/log": {
            "get": {
                "summary": "The run's log: the worker's notes and the model process's stdout/stderr",
                "parameters": [id_param],
                "responses": {
                    "200": {
                        "description": "Plain text.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    "404": _error_response("No log yet, or the run kept none."),
                },
            }
        },
        "/models": {
            "get": {
                "summary": "The model catalog with parameter schemas and worker presence",
                "responses": {"200": {"description": "Models."}},
            }
        },
        "/healthz": {"get": {"summary": "Process up", "responses": {"200": {"description": "OK"}}}},
        "/readyz": {
            "get": {
                "summary": "Database, broker and object store reachable",
                "responses": {"200": {"description": "Ready"}, "503": {"description": "Not ready"}},
            }
        },
        "/openapi.json": {
            "get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3.1"}}}
        },
    }
    paths.update(batch_paths(components))
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "jobservice",
            "version": __version__,
            "description": "Queue-backed batch video jobs.",
        },
        "paths": paths,
        "components": {"schemas": components},
    }
