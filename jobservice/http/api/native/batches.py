"""``/batches``: create a nightly batch from a spec, follow it, read its report, compare two.

Every view is parse -> service -> serialize; a malformed spec is a 422 ``invalid_spec`` with
per-field details, an unknown batch a 404, an action that does not fit its state a 409.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from flask import Blueprint, Response, jsonify, request
from pydantic import BaseModel, Field, ValidationError, model_validator

from jobservice.auth.owned import load_owned
from jobservice.catalog import Catalog
from jobservice.db.tables import Batch
from jobservice.errors import Conflict, DomainError, Invalid, Malformed, NotFound, TooLarge, Unsupported
from jobservice.http.api.bodies import json_object, read_body
from jobservice.http.api.doc import (
    RouteTable,
    Schema,
    View,
    answer,
    in_path,
    in_query,
    ref,
    refused,
)
from jobservice.http.api.native.jobs import services
from jobservice.http.api.native.sets import (
    CREATION_KEY,
    SetRoutes,
    answer_created,
    creation_responses,
    parse_limit,
)
from jobservice.http.api.policy.auth import current_principal
from jobservice.jobs.idempotency import parse_idempotency_key
from jobservice.nightly.compare import Night, compare_results
from jobservice.nightly.finalize import refresh_batch
from jobservice.nightly.pins import pin_batch
from jobservice.nightly.plan import plan_batch, private_paths
from jobservice.nightly.presenters import BatchView, batch_jobs, batch_view, list_batches, list_views
from jobservice.nightly.render import render_csv, render_json, render_markdown
from jobservice.nightly.service import cancel_batch, create_batch, resume_batch
from jobservice.nightly.spec import (
    MAX_SPEC_BYTES,
    LoadedSpec,
    SpecError,
    load_spec_file,
    parse_spec,
    parse_spec_text,
    resolve_under,
)
from jobservice.nightly.states import BatchStatus

bp = Blueprint("batches", __name__)
api = RouteTable(bp)

# Not text/plain: a browser sends that from any site without asking first (a "simple" request).
YAML_TYPES = {"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"}
REPORT_TYPES = {"json": "application/json", "csv": "text/csv", "md": "text/markdown"}
MAX_BODY_BYTES = 2 * MAX_SPEC_BYTES  # a spec of the largest size, escaped inside JSON


class BatchCreate(BaseModel):
    """The JSON body of ``POST /batches``: exactly one of the three ways to give a spec."""

    spec: dict[str, Any] | None = Field(None, description="The spec itself, as JSON.")
    spec_yaml: str | None = Field(None, description="The spec as YAML text.")
    spec_path: str | None = Field(None, description="A spec file, relative to the batch root.")

    @model_validator(mode="before")
    @classmethod
    def _exactly_one(cls, body: Any) -> Any:
        if isinstance(body, dict) and sum(body.get(k) is not None for k in SPEC_FIELDS) != 1:
            raise ValueError("exactly one spec")
        return body


SPEC_FIELDS = ("spec", "spec_yaml", "spec_path")
# The sentence for each way a BatchCreate body can be wrong ("": not exactly one of them).
CREATE_PROBLEMS = {
    "": "Give exactly one of 'spec', 'spec_yaml' or 'spec_path'.",
    "spec": "A batch spec must be a mapping with 'name' and 'cases'.",
    "spec_yaml": "'spec_yaml' must be a string of YAML.",
    "spec_path": "'spec_path' must be a path under the batch root.",
}


# --- what the routes read and answer (/openapi.json) ---------------------------------------------
BATCH_MODELS: tuple[type[BaseModel], ...] = (BatchView, BatchCreate)
BATCH = "/batches/{batch_id}"
READS = SetRoutes(api, BATCH, noun="batch", view="BatchView")  # its reads are declared at the end
NO_BATCH = READS.missing


def _spec_body(_catalog: Catalog) -> Schema:
    return {
        "application/yaml": {"schema": {"type": "string"}},
        "application/json": {"schema": ref("BatchCreate")},
    }


def _action(name: str, summary: str, ok: str, conflict: str) -> Callable[[View], View]:
    """Register and describe a ``POST /batches/{batch_id}/<name>`` that answers the batch."""
    return api.route(
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


def _spec_error(exc: SpecError) -> DomainError:
    return Invalid("invalid_spec", exc.message, details=exc.details)


def _loaded_spec() -> LoadedSpec:
    """The spec of a POST /batches: YAML text, or JSON with one of spec / spec_yaml / spec_path."""
    root = services().settings.batch_root.resolve()
    if request.mimetype not in YAML_TYPES and request.mimetype != "application/json":
        raise Unsupported("unsupported_media_type", "Send the spec as application/yaml, or JSON with 'spec'.")
    raw = _body()
    if request.mimetype in YAML_TYPES:
        try:
            return parse_spec_text(raw.decode("utf-8"), origin="api")
        except UnicodeDecodeError:
            raise Malformed("invalid_yaml", "The spec must be UTF-8 text.") from None
    body = json_object(raw)
    try:
        create = BatchCreate.model_validate(body)
    except ValidationError as exc:
        loc = exc.errors()[0]["loc"]
        raise Invalid("invalid_spec", CREATE_PROBLEMS[str(loc[0]) if loc else ""]) from None
    if create.spec is not None:
        return parse_spec(create.spec, origin="api")
    if create.spec_yaml is not None:
        return parse_spec_text(create.spec_yaml, origin="api")
    assert create.spec_path is not None  # BatchCreate holds exactly one
    private = private_paths(services().settings)
    loaded = load_spec_file(resolve_under(root, create.spec_path, what="spec path", private=private))
    return LoadedSpec(loaded.spec, loaded.text, loaded.digest, create.spec_path, loaded.base_dir)


def _body() -> bytes:
    """The request body, refused with a 413 past ``MAX_BODY_BYTES`` (before it is all read)."""
    too_large = TooLarge(
        "spec_too_large",
        f"The request is larger than {MAX_BODY_BYTES // 2**20} MB; a spec is much smaller.",
    )
    return read_body(request, limit=MAX_BODY_BYTES, too_large=too_large)


def _render(batch: Batch, status: int = 200) -> Response:
    with services().db.session() as session:
        view = batch_view(session, batch)
    response = jsonify(view.model_dump(mode="json"))
    response.status_code = status
    if not BatchStatus(batch.status).is_ended:
        response.headers["X-Poll-After-Ms"] = "2000"
    return response


def load_batch(raw_id: str) -> Batch:
    """The batch named in the URL if the caller may see it (another tenant's batch is a 404)."""
    missing = NotFound("batch_not_found", f"There is no batch '{raw_id}'.")
    batch = load_owned(raw_id, current_principal(), partial(services().db.get, Batch), missing=missing)
    return refresh_batch(services(), batch.id)


@api.route(
    "post",
    "/batches",
    "Create a nightly batch from a spec (its jobs queue below interactive ones)",
    parameters=(CREATION_KEY,),
    body=_spec_body,
    responses=creation_responses(
        "BatchView",
        "Created; its jobs are queued.",
        "Idempotent replay.",
        {
            "400": "Malformed JSON, or a bad Idempotency-Key.",
            "409": "Idempotency-Key reused for another spec.",
            "413": "The body is larger than 2 MB.",
            "415": "Send YAML or JSON.",
            "422": "Invalid spec (details name each field).",
        },
    ),
)
def create() -> Response:
    """Create a batch from a spec: 202 with its summary, or 200 for an idempotent replay."""
    svc = services()
    root = svc.settings.batch_root.resolve()
    try:
        loaded = _loaded_spec()
        with plan_batch(svc, loaded, confine_to=root, tenant=current_principal().scope()) as plan:
            batch, created = create_batch(
                svc,
                plan,
                source="api",
                idempotency_key=parse_idempotency_key(request.headers.get("Idempotency-Key")),
                principal=current_principal(),
            )
    except SpecError as exc:
        raise _spec_error(exc) from None
    response = _render(batch, 202 if created else 200)
    return answer_created(response, svc, batch.id, location=f"/batches/{batch.id}", created=created)


@api.route(
    "get",
    "/batches",
    "Batches, newest first",
    parameters=(
        in_query("name"),
        in_query("status"),
        in_query("limit", {"type": "integer", "minimum": 1, "maximum": 100}),
    ),
    responses={"200": answer("A list of batches."), "422": refused("Bad filter.")},
)
def index() -> Response:
    """Batches newest first, by spec name and status."""
    limit = parse_limit(request.args.get("limit", "20"))
    with services().db.session() as session:
        rows = list_batches(
            session,
            name=request.args.get("name") or None,
            status=request.args.get("status") or None,
            limit=limit,
            tenant=current_principal().scope() or request.args.get("tenant") or None,
        )
        views = [view.model_dump(mode="json") for view in list_views(session, rows)]
    return jsonify({"object": "list", "batches": views})


@api.route(
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
)
def compare() -> Response:
    """``?baseline=A&candidate=B``: B's cases against A's, worst first."""
    ids = {k: request.args.get(k) for k in ("baseline", "candidate")}
    missing = [k for k, v in ids.items() if not v]
    if missing:
        raise Invalid("missing_parameter", f"Give '{missing[0]}' (a batch id).")
    baseline, candidate = (_finished(str(ids[k])) for k in ("baseline", "candidate"))
    # Two runs alone (the cold start's rule); a night's own verdict, against its history, is the batch's.
    result = compare_results(
        baseline.results, candidate.results, spec=candidate.spec, night=Night(use_history=False)
    )
    result.update(baseline_id=str(baseline.id), candidate_id=str(candidate.id))
    return jsonify(result)


def _finished(raw_id: str) -> Batch:
    batch = load_batch(raw_id)
    if batch.status != BatchStatus.FINISHED:
        message = f"Batch {batch.id} is {batch.status}; it has no report yet."
        raise Conflict("batch_not_finished", message)
    return batch


@api.route(
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
)
def report(batch_id: str) -> Response:
    """The report: ``?format=json`` (default), ``csv`` or ``md``."""
    fmt = request.args.get("format", "json")
    if fmt not in REPORT_TYPES:
        raise Invalid("invalid_format", "format must be json, csv or md.")
    batch = _finished(batch_id)
    body = {"json": render_json, "csv": render_csv, "md": render_markdown}[fmt](batch)
    response = Response(body, mimetype=REPORT_TYPES[fmt])
    if fmt != "json":
        response.headers["Content-Disposition"] = f'inline; filename="batch-{batch.name}-{batch.id}.{fmt}"'
    return response


@_action("resume", "Queue what the batch has not run yet", "Resumed.", "Finished: nothing to resume.")
def resume(batch_id: str) -> Response:
    """Queue the slots with no job yet (or a canceled one); finished cases are not run again."""
    return _render(resume_batch(services(), load_batch(batch_id).id), 202)


@_action("pin", "Accept as the new normal (its cases' history restarts here)", "Accepted.", "Not finished.")
def pin(batch_id: str) -> Response:
    """Accept this finished batch as the new normal: its cases' history restarts at it."""
    return _render(pin_batch(services(), load_batch(batch_id).id, pinned=True))


@_action("unpin", "Undo an accept: the history reaches back past it", "Unpinned.", "-")
def unpin(batch_id: str) -> Response:
    """Undo accepting this batch: its cases' history reaches back past it again."""
    return _render(pin_batch(services(), load_batch(batch_id).id, pinned=False))


READS.declare_reads(
    load=load_batch,
    render=_render,
    cancel=cancel_batch,
    default_limit=None,
    every_job=batch_jobs,
    job_extra=lambda job: {"batch": {"case": job.batch_case, "repeat": job.batch_repeat}},
    shows="; once finished, each case's verdict",
)
