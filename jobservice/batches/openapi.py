"""The ``/batches`` part of ``/openapi.json`` (merged in by ``jobservice.api.openapi``)."""

from __future__ import annotations

from typing import Any

from jobservice.batches.views import BatchView

REF = "#/components/schemas/{model}"


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": REF.format(model="Error")}}},
    }


def _batch(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": REF.format(model="BatchView")}}},
    }


def batch_paths(components: dict[str, Any]) -> dict[str, Any]:
    """The batch endpoints; adds the BatchView schema to ``components``."""
    schema = BatchView.model_json_schema(ref_template=REF)
    components.update(schema.pop("$defs", {}))
    components["BatchView"] = schema
    batch_id = {
        "name": "batch_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "format": "uuid"},
    }
    not_found = _error("No such batch.")
    spec_body = {
        "type": "object",
        "description": "Exactly one of spec (the spec as JSON), spec_yaml, spec_path (under the batch root).",
        "properties": {
            "spec": {"type": "object"},
            "spec_yaml": {"type": "string"},
            "spec_path": {"type": "string"},
        },
    }

    def action(summary: str, ok: str, conflict: str) -> dict[str, Any]:
        return {
            "post": {
                "summary": summary,
                "parameters": [batch_id],
                "responses": {
                    "200": _batch(ok),
                    "202": _batch(ok),
                    "404": not_found,
                    "409": _error(conflict),
                },
            }
        }

    return {
        "/batches": {
            "post": {
                "summary": "Create a nightly batch from a spec (its jobs queue below interactive ones)",
                "parameters": [
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                    }
                ],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/yaml": {"schema": {"type": "string"}},
                        "application/json": {"schema": spec_body},
                    },
                },
                "responses": {
                    "202": _batch("Created; its jobs are queued."),
                    "200": _batch("Idempotent replay."),
                    "400": _error("Malformed JSON, or a bad Idempotency-Key."),
                    "409": _error("Idempotency-Key reused for another spec."),
                    "413": _error("The body is larger than 2 MB."),
                    "415": _error("Send YAML or JSON."),
                    "422": _error("Invalid spec (details name each field)."),
                },
            },
            "get": {
                "summary": "Batches, newest first",
                "parameters": [
                    {"name": "name", "in": "query", "schema": {"type": "string"}},
                    {"name": "status", "in": "query", "schema": {"type": "string"}},
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 100},
                    },
                ],
                "responses": {"200": {"description": "A list of batches."}, "422": _error("Bad filter.")},
            },
        },
        "/batches/compare": {
            "get": {
                "summary": "A candidate batch against a baseline, worst cases first",
                "parameters": [
                    {"name": "baseline", "in": "query", "required": True, "schema": {"type": "string"}},
                    {"name": "candidate", "in": "query", "required": True, "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": {"description": "Verdicts."},
                    "404": not_found,
                    "409": _error("Not finished."),
                },
            }
        },
        "/batches/{batch_id}": {
            "get": {
                "summary": "A batch's progress, and once finished each case's verdict",
                "parameters": [batch_id],
                "responses": {"200": _batch("The batch."), "404": not_found},
            }
        },
        "/batches/{batch_id}/jobs": {
            "get": {
                "summary": "The batch's jobs",
                "parameters": [batch_id],
                "responses": {"200": {"description": "Jobs."}, "404": not_found},
            }
        },
        "/batches/{batch_id}/report": {
            "get": {
                "summary": "The report of a finished batch",
                "parameters": [
                    batch_id,
                    {
                        "name": "format",
                        "in": "query",
                        "schema": {"enum": ["json", "csv", "md"], "default": "json"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The report.",
                        "content": {"application/json": {}, "text/csv": {}, "text/markdown": {}},
                    },
                    "404": not_found,
                    "409": _error("Not finished yet."),
                },
            }
        },
        "/batches/{batch_id}/cancel": action(
            "Cancel the batch's unfinished jobs", "Canceled.", "Already ended."
        ),
        "/batches/{batch_id}/resume": action(
            "Queue what the batch has not run yet", "Resumed.", "Finished: nothing to resume."
        ),
        "/batches/{batch_id}/pin": action("Pin as its spec's baseline", "Pinned.", "Not finished."),
        "/batches/{batch_id}/unpin": action("Stop using as the baseline", "Unpinned.", "-"),
    }
