"""The ``/batches`` routes of ``/openapi.json`` (built by ``jobservice.http.api.openapi``)."""

from __future__ import annotations

from pydantic import BaseModel

from jobservice.batches.schemas import BatchView
from jobservice.catalog import Catalog
from jobservice.http.api.batches import BatchCreate
from jobservice.http.api.doc import Route, Schema, answer, idempotency_key, in_path, in_query, ref, refused

BATCH_MODELS: tuple[type[BaseModel], ...] = (BatchView, BatchCreate)
BATCH = "/batches/{batch_id}"
NO_BATCH = refused("No such batch.")


def _spec_body(_catalog: Catalog) -> Schema:
    return {
        "application/yaml": {"schema": {"type": "string"}},
        "application/json": {"schema": ref("BatchCreate")},
    }


def _action(name: str, summary: str, ok: str, conflict: str) -> Route:
    """A ``POST /batches/{batch_id}/<name>`` that answers the batch."""
    return Route(
        "post",
        f"{BATCH}/{name}",
        summary,
        parameters=(in_path("batch_id"),),
        responses={
            "200": answer(ok, "BatchView"),
            "202": answer(ok, "BatchView"),
            "404": NO_BATCH,
            "409": refused(conflict),
        },
    )


BATCH_ROUTES: tuple[Route, ...] = (
    Route(
        "post",
        "/batches",
        "Create a nightly batch from a spec (its jobs queue below interactive ones)",
        parameters=(idempotency_key({"type": "string", "minLength": 1, "maxLength": 255}),),
        body=_spec_body,
        responses={
            "202": answer("Created; its jobs are queued.", "BatchView"),
            "200": answer("Idempotent replay.", "BatchView"),
            "400": refused("Malformed JSON, or a bad Idempotency-Key."),
            "409": refused("Idempotency-Key reused for another spec."),
            "413": refused("The body is larger than 2 MB."),
            "415": refused("Send YAML or JSON."),
            "422": refused("Invalid spec (details name each field)."),
            "503": refused("A dependency is unavailable."),
            "507": refused("Too little free space in the store or spool (insufficient_storage)."),
        },
    ),
    Route(
        "get",
        "/batches",
        "Batches, newest first",
        parameters=(
            in_query("name"),
            in_query("status"),
            in_query("limit", {"type": "integer", "minimum": 1, "maximum": 100}),
        ),
        responses={"200": answer("A list of batches."), "422": refused("Bad filter.")},
    ),
    Route(
        "get",
        "/batches/compare",
        "A candidate batch against a baseline, worst cases first",
        parameters=(in_query("baseline", required=True), in_query("candidate", required=True)),
        responses={
            "200": answer("Verdicts."),
            "404": NO_BATCH,
            "409": refused("Not finished."),
            "422": refused("A batch id is missing."),
        },
    ),
    Route(
        "get",
        BATCH,
        "A batch's progress, and once finished each case's verdict",
        parameters=(in_path("batch_id"),),
        responses={"200": answer("The batch.", "BatchView"), "404": NO_BATCH},
    ),
    Route(
        "get",
        BATCH + "/jobs",
        "The batch's jobs, oldest first: all, or with limit a page at a time (next_cursor)",
        parameters=(
            in_path("batch_id"),
            in_query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}),
            in_query("cursor"),
        ),
        responses={
            "200": answer("Jobs, and the cursor of the next page (null on the last)."),
            "400": refused("A cursor this API did not make (invalid_cursor)."),
            "404": NO_BATCH,
            "422": refused("limit is not a whole number from 1 to 1000 (invalid_limit)."),
        },
    ),
    Route(
        "get",
        BATCH + "/report",
        "The report of a finished batch",
        parameters=(
            in_path("batch_id"),
            in_query("format", {"enum": ["json", "csv", "md"], "default": "json"}),
        ),
        responses={
            "200": {
                "description": "The report.",
                "content": {"application/json": {}, "text/csv": {}, "text/markdown": {}},
            },
            "404": NO_BATCH,
            "409": refused("Not finished yet."),
        },
    ),
    _action("cancel", "Cancel the batch's unfinished jobs", "Canceled.", "Already ended."),
    _action("resume", "Queue what the batch has not run yet", "Resumed.", "Finished: nothing to resume."),
    _action("pin", "Pin as its spec's baseline", "Pinned.", "Not finished."),
    _action("unpin", "Stop using as the baseline", "Unpinned.", "-"),
)
