"""``/jobs``: submit, poll, list, cancel, delete, and fetch a job's video and report."""

from __future__ import annotations

import json
import logging
import uuid
from functools import partial
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, redirect, request, send_file
from sqlalchemy import Row

from jobservice.auth.owned import load_owned
from jobservice.auth.principal import Principal
from jobservice.catalog import Catalog
from jobservice.db.engine import Database
from jobservice.db.tables import Job, JobStatus
from jobservice.errors import Conflict, Gone, Invalid, NotFound
from jobservice.fleet.eta import Stored, behind_of
from jobservice.fleet.eta import latest as latest_forecast
from jobservice.http.api.doc import (
    RouteTable,
    Schema,
    answer,
    follow,
    idempotency_key,
    in_path,
    in_query,
    ref,
    refused,
)
from jobservice.http.api.native.prefer import PREFER_WAIT, applied, held
from jobservice.http.api.native.submission import parse_submission
from jobservice.http.api.policy.auth import current_principal
from jobservice.jobs import previews, retries
from jobservice.jobs.lookup import job_of, read_job_row
from jobservice.jobs.presenters import JobList, job_view, job_views, list_jobs
from jobservice.jobs.queries import events_of
from jobservice.jobs.submit import submit_job
from jobservice.jobs.transitions import InvalidTransition, request_cancel
from jobservice.jobs.views import JobDeleted
from jobservice.reports.visibility import tenant_view
from jobservice.retention.deletion import delete_job
from jobservice.storage import ObjectNotFound, StoreUnavailable
from jobservice.wiring import Services

bp = Blueprint("jobs", __name__)
api = RouteTable(bp)
log = logging.getLogger(__name__)

POLL_AFTER_MS = "1000"


# --- what the routes read and answer (/openapi.json) ---------------------------------------------
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


def services() -> Services:
    """The Services of the running app."""
    return current_app.extensions["jobservice"]


def owned_row(
    db: Database, raw_id: str | uuid.UUID, principal: Principal, *, missing: NotFound | None = None
) -> Row[Any]:
    """The job's row if ``principal`` may see it (``auth.owned``: another tenant's job is no job, a 404
    ``job_not_found`` unless ``missing`` says otherwise), read without an ORM session
    (``jobservice.jobs.lookup``); deleted or not."""
    missing = missing or NotFound("job_not_found", f"There is no job '{raw_id}'.")
    return load_owned(raw_id, principal, partial(read_job_row, db), missing=missing)


def visible_row(db: Database, job_id: uuid.UUID, principal: Principal) -> Row[Any] | None:
    """The job's row if ``principal`` may see it and it is not deleted, else None: the poll path's
    read."""
    try:
        row = owned_row(db, job_id, principal)
    except NotFound:
        return None
    return row if row.deleted_at is None else None


def load_job(raw_id: str, principal: Principal | None = None) -> Job:
    """The job named in the URL if the caller may see it (another tenant's job is a 404 too); a
    deleted one is a 404 ``job_deleted``."""
    row = owned_row(services().db, raw_id, principal or current_principal())
    if row.deleted_at is not None:
        raise NotFound("job_deleted", f"Job {row.id} was deleted on {row.deleted_at:%Y-%m-%d %H:%M} UTC.")
    return job_of(row)


def files_of(job: Job, *, noun: str = "Job") -> Job:
    """``job`` if its files still exist; 410 ``expired`` once retention deleted them (a job deleted on
    request is a 404 before this)."""
    if job.expired_at is not None:
        raise Gone(
            "expired",
            f"{noun} {job.id}'s files were deleted on {job.expired_at:%Y-%m-%d %H:%M} UTC (retention); "
            "its record stays.",
        )
    return job


def files_of_try(job: Job) -> tuple[str | None, str | None]:
    """(video key, report key) of the job's current try, or of the earlier try ``?try=N`` names (a
    try the gate failed before the job ran again with the next seed, ``jobservice.jobs.retries``)."""
    raw = request.args.get("try")
    if raw is None:
        return job.output_key, job.report_key
    tries = retries.tries_of(job)
    if not (raw.isascii() and raw.isdecimal() and 1 <= int(raw) <= len(tries) + 1):
        raise NotFound(
            "try_not_found",
            f"Job {job.id} has no try '{raw}'; its tries are numbered 1 to {len(tries) + 1}.",
        )
    number = int(raw)
    if number == len(tries) + 1:
        return job.output_key, job.report_key
    tried = tries[number - 1]
    return tried.get("output_key"), tried.get("report_key")


def render(job: Job, status: int = 200) -> Response:
    """A job view response, with a polling hint while the job is unfinished; a queued job submitted
    after the forecast needs one query (``behind_of``: its tenant's jobs submitted since, before it)."""
    forecast = latest_forecast(services())
    behind = 0
    if JobStatus(job.status) == JobStatus.QUEUED:
        with services().db.reading() as conn:  # a kept autocommit connection: no pool round trip
            behind = behind_of(conn, forecast, job)
    return view_response(job, forecast, behind=behind, status=status)


def view_response(job: Job, forecast: Stored | None, *, behind: int = 0, status: int = 200) -> Response:
    """The response showing ``job``, its ETA and a queued one's position from the fleet's
    ``forecast`` (``behind``: ``eta.behind_of``): a function of these alone, which the fast path's kept
    answers rest on (``fast_poll``; tests/unit/test_fast_poll.py fails when it reads anything else)."""
    view = job_view(job, forecast=forecast, behind=behind)
    # pydantic's own serializer: a third of the cost of model_dump + jsonify on the poll path.
    response = Response(view.model_dump_json() + "\n", status=status, mimetype="application/json")
    if not JobStatus(job.status).is_terminal:
        response.headers["X-Poll-After-Ms"] = POLL_AFTER_MS
    return response


# What the routes of a job's stored files answer alike.
EXPIRED = refused("Its files were deleted by retention (expired).")
STORE_DOWN = refused("The object store is unavailable.")


def video_answers(description: str) -> dict[str, Schema]:
    """A video's answers: the MP4 (``description``), a Range's part, or a presigned redirect (S3)."""
    mp4: Schema = {"video/mp4": {}}
    return {
        "200": {"description": description, "content": mp4},
        "206": {"description": "Partial content", "content": mp4},
        "302": answer("Redirect to a presigned URL"),
    }


@api.route(
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
        "409": refused(
            "Idempotency-Key reused for a different request, or for a job since deleted "
            "(idempotency_key_deleted)."
        ),
        "413": refused("Upload too large."),
        "415": refused("Unsupported content or file type."),
        "422": refused("Invalid parameters or input files."),
        "503": refused("A dependency is unavailable."),
        "507": refused("Too little free space in the store or spool (insufficient_storage)."),
    },
)
def create_job() -> Response:
    """Accept a job: 202 with its view and Location, or 200 for an idempotent replay."""
    sub = parse_submission(request, services().settings, source="api")
    sub.principal = current_principal()
    job, created = submit_job(services(), sub)
    job, wait = held(job, request)  # Prefer: wait=N
    response = applied(render(job, 202 if created else 200), wait)
    response.headers["Location"] = f"/jobs/{job.id}"
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    return response


@api.route(
    "get",
    JOB,
    "A job",
    parameters=(in_path("job_id"), PREFER_WAIT),
    responses={"200": answer("The job.", "JobView"), "404": NO_JOB},
)
def show_job(job_id: str) -> Response:
    """The job's current view (with ``Prefer: wait=N``, once it ended or N seconds passed)."""
    job, wait = held(load_job(job_id), request)
    return applied(render(job), wait)


@api.route(
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
)
def index_jobs() -> Response:
    """Jobs newest first, filtered by status and model, with cursor pagination."""
    statuses: list[JobStatus] = []
    for raw in request.args.getlist("status"):
        for value in filter(None, (s.strip() for s in raw.split(","))):
            try:
                statuses.append(JobStatus(value))
            except ValueError:
                allowed = ", ".join(s.value for s in JobStatus)
                raise Invalid("invalid_status", f"Unknown status '{value}'; use one of {allowed}.") from None
    raw_limit = request.args.get("limit", "20")
    if not raw_limit.isdecimal() or not raw_limit.isascii() or not 1 <= int(raw_limit) <= 100:
        raise Invalid("invalid_limit", "limit must be a whole number from 1 to 100.")
    model = request.args.get("model") or None
    principal = current_principal()
    # An admin sees every tenant's jobs, or one tenant's with ?tenant=; anyone else only their own.
    tenant = principal.scope() or request.args.get("tenant") or None
    with services().db.session() as session:
        rows, next_cursor = list_jobs(
            session,
            statuses=statuses,
            model=model,
            limit=int(raw_limit),
            cursor=request.args.get("cursor") or None,
            tenant=tenant,
        )
        page = JobList(
            jobs=job_views(session, rows, forecast=latest_forecast(services())), next_cursor=next_cursor
        )
    return Response(page.model_dump_json() + "\n", mimetype="application/json")  # one pydantic pass


@api.route(
    "post",
    JOB + "/cancel",
    "Cancel a job (queued: at once; running: at the next step or chunk)",
    parameters=(in_path("job_id"),),
    responses={
        "202": answer("Canceled or cancel requested.", "JobView"),
        "404": NO_JOB,
        "409": refused("Already finished."),
    },
)
def cancel_job(job_id: str) -> Response:
    """Cancel a queued job at once, or ask a running one to stop at its next boundary."""
    job = load_job(job_id)
    try:
        with services().db.session() as session:
            request_cancel(session, job.id, actor=current_principal().actor)
    except InvalidTransition as exc:
        state = exc.current.value if exc.current else "gone"
        raise Conflict("job_finished", f"The job is already {state}; there is nothing to cancel.") from None
    return render(load_job(job_id), 202)


@api.route(
    "delete",
    JOB,
    "Delete a job: cancel it if queued, delete its files; then it is gone (404 job_deleted)",
    parameters=(in_path("job_id"),),
    responses={
        "200": answer("Deleted.", "JobDeleted"),
        "404": refused("No such job (job_not_found), or already deleted (job_deleted)."),
        "409": refused(
            "Running: asked to stop, delete again once it ended (cancel_pending); or part of a batch "
            "(in_batch) or a job group (in_group)."
        ),
        "503": STORE_DOWN,
    },
)
def remove_job(job_id: str) -> Response:
    """Delete the job: a queued one is canceled first, a running one is asked to stop (409 until it
    has); its files are deleted and it is gone from lists and reads (``retention.deletion``)."""
    job = load_job(job_id)
    deleted_at = delete_job(services(), job, actor=current_principal().actor)
    return Response(
        JobDeleted(id=str(job.id), deleted_at=deleted_at).model_dump_json() + "\n",
        mimetype="application/json",
    )


@api.route(
    "get",
    JOB + "/events",
    "A job's transitions",
    parameters=(in_path("job_id"),),
    responses={"200": answer("Events."), "404": NO_JOB},
)
def job_events(job_id: str) -> Response:
    """The job's audit trail: every transition with its time, attempt and worker."""
    job = load_job(job_id)
    with services().db.session() as session:
        events = events_of(session, job.id)
    return jsonify(
        {
            "object": "list",
            "events": [
                {
                    "at": e.at.isoformat(),
                    "from": e.from_status,
                    "to": e.to_status,
                    "attempt": e.attempt,
                    "worker_id": e.worker_id,
                    "actor": e.actor,
                    "detail": e.detail,
                }
                for e in events
            ],
        }
    )


@api.route(
    "get",
    JOB + "/video",
    "The output video (Range requests locally; 302 to a presigned URL on S3)",
    parameters=(in_path("job_id"), in_query("download", {"type": "boolean"}), TRY),
    responses={
        **video_answers("MP4"),
        "404": refused("No video yet."),
        "410": EXPIRED,
    },
)
def job_video(job_id: str) -> Any:
    """The output video (``?try=N``: an earlier try's): streamed with Range support (local store)
    or a presigned redirect (S3)."""
    job = files_of(load_job(job_id))
    output_key, _ = files_of_try(job)
    if not output_key:
        raise NotFound("video_not_ready", f"Job {job.id} has no video yet (it is {job.status}).")
    download = request.args.get("download") in {"1", "true", "yes"}
    name = f"{job.id}.mp4" if output_key == job.output_key else f"{job.id}-try-{request.args['try']}.mp4"
    return send_video(output_key, name, download=download, max_age=3600)


def send_video(key: str, name: str, *, download: bool = False, max_age: int | None = 3600) -> Any:
    """The stored video ``key``: streamed with Range support (local store) or a presigned redirect
    (S3); ``max_age`` None: the answer must not be cached (a preview's)."""
    store = services().store
    path = store.local_path(key)
    if path is not None:
        if not path.exists():
            raise NotFound("video_missing", "The video is recorded but missing from the object store.")
        response = send_file(
            path,
            mimetype="video/mp4",
            conditional=True,
            as_attachment=download,
            download_name=name,
            max_age=max_age,
        )
        if max_age is None:
            response.headers["Cache-Control"] = "no-store"
        return response
    url = store.presigned_url(key, filename=name if download else None)
    if url is None:
        raise NotFound("video_missing", "The object store cannot hand out this video.")
    return redirect(url, code=302)


@api.route(
    "get",
    JOB + "/preview",
    "A running job's preview: what it has rendered so far, with its audio, not yet validated",
    parameters=(
        in_path("job_id"),
        in_query(
            "n",
            {"type": "integer", "minimum": 1},
            description="The preview's number (links.preview names it): the latest or one of the two "
            "before it; without it, the latest.",
        ),
    ),
    responses={
        **video_answers("MP4 (+faststart)"),
        "404": refused(
            "No preview: preview_not_ready (none yet, or the job is queued), no_preview (the model's back "
            "end hands over its video only once it is finished), preview_replaced (the job ended: see "
            "/video), preview_not_found (a number no longer kept)."
        ),
        "410": EXPIRED,
        "422": refused("n is not a whole number from 1 (invalid_preview_number)."),
    },
)
def job_preview(job_id: str) -> Any:
    """The job's latest preview (``?n=``: that one, while stored): what it has rendered so far, an
    MP4 a browser plays; never cached, for the next preview replaces it."""
    job = files_of(load_job(job_id))
    raw = request.args.get("n")
    number = None
    if raw is not None:
        if not (raw.isascii() and raw.isdecimal() and int(raw) >= 1):
            raise Invalid("invalid_preview_number", f"n must be a whole number from 1, not '{raw[:40]}'.")
        number = int(raw)
    status = JobStatus(job.status)
    if status.is_terminal:
        raise NotFound(
            "preview_replaced",
            f"Job {job.id} is {status.value}: its preview is replaced by its video (links.video).",
        )
    view = previews.preview_of(job)
    if view is not None and view.state == "none":
        raise NotFound("no_preview", view.message)
    key = previews.preview_key(job, number)
    if key is None:
        if view is not None and view.state == "ready" and number is not None:
            raise NotFound(
                "preview_not_found",
                f"Preview {number} of job {job.id} is not kept; the latest is {view.number}.",
            )
        raise NotFound("preview_not_ready", f"Job {job.id} has no preview yet (it is {status.value}).")
    return send_video(key, f"{job.id}-preview.mp4", max_age=None)


@api.route(
    "get",
    JOB + "/log",
    "The run's log: the worker's notes and the model process's stdout/stderr",
    parameters=(in_path("job_id"), TRY),
    responses={
        "200": {"description": "Plain text.", "content": {"text/plain": {"schema": {"type": "string"}}}},
        "404": refused("No log yet, or the run kept none."),
        "410": EXPIRED,
        "503": STORE_DOWN,
    },
)
def job_log(job_id: str) -> Response:
    """The log of the job's last run (``?try=N``: an earlier try's): the worker's notes and the
    model process's stdout/stderr."""
    job = files_of(load_job(job_id))
    _, report_key = files_of_try(job)
    if not report_key:
        raise NotFound("log_not_ready", f"Job {job.id} has no log yet (it is {job.status}).")
    try:
        # A run stores its log beside its report (jobs/<id>/ or jobs/<id>/attempt-<n>/).
        data = services().store.get_bytes(report_key.rsplit("/", 1)[0] + "/log.txt")
    except ObjectNotFound:
        raise NotFound("log_missing", "This run kept no log.") from None
    except StoreUnavailable as exc:
        log.error("job %s: reading from the object store failed: %s", job.id, exc)
        raise
    return Response(data, mimetype="text/plain")


@api.route(
    "get",
    JOB + "/report",
    "The RunReport",
    parameters=(in_path("job_id"), TRY),
    responses={
        "200": answer("RunReport", "RunReport"),
        "404": refused("No report yet."),
        "410": EXPIRED,
        "503": STORE_DOWN,
    },
)
def job_report(job_id: str) -> Response:
    """The RunReport JSON of the job's last run (``?try=N``: an earlier try's; deployment details
    for admins only)."""
    job = files_of(load_job(job_id))
    _, report_key = files_of_try(job)
    if not report_key:
        raise NotFound("report_not_ready", f"Job {job.id} has no report yet (it is {job.status}).")
    try:
        data = services().store.get_bytes(report_key)
    except ObjectNotFound:
        raise NotFound(
            "report_missing", "The report is recorded but missing from the object store."
        ) from None
    except StoreUnavailable as exc:
        log.error("job %s: reading from the object store failed: %s", job.id, exc)
        raise
    report = json.loads(data)
    if not current_principal().is_admin:
        report = tenant_view(report)
    return Response(json.dumps(report, indent=2), mimetype="application/json")
