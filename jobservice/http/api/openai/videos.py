"""``/v1/videos``: the OpenAI Videos API (and vLLM-Omni's form of it) over the jobs system.

A video is a job: created through ``submit_job`` like ``POST /jobs`` (same table, queue, gate,
quotas, tenants and keys), with the id usable on both surfaces. Requests are read by
``openai_mapping``, jobs rendered by ``openai_view``; refusals on these routes use OpenAI's error
shape, with 400 (not 422) for a value the model refuses.

``DELETE`` is the native ``DELETE /jobs/<id>`` (``jobservice.retention.deletion.delete_job``): it
cancels a queued video and deletes its files, and the video is gone from both APIs; a running video
is asked to stop and answered 409 until it has.
"""

from __future__ import annotations

import json
from typing import Any

from flask import Blueprint, Response, jsonify, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from jobservice.db.tables import Job, JobEvent, JobStatus
from jobservice.errors import DomainError, Invalid, NotFound, TooLarge, Unsupported
from jobservice.fleet.eta import behind_of
from jobservice.fleet.eta import latest as latest_forecast
from jobservice.http.api.bodies import json_object, read_body
from jobservice.http.api.doc import RouteTable, answer, idempotency_key, in_path, in_query, refused
from jobservice.http.api.errors import HTTP_CODES, refusal_of
from jobservice.http.api.native.jobs import POLL_AFTER_MS, files_of, job_video, owned_row, services
from jobservice.http.api.native.submission import FORM_TYPES
from jobservice.http.api.openai.doc import NO_VIDEO, VIDEO, VIDEO_REFUSALS, create_body, remix_body
from jobservice.http.api.openai.mapping import check_inputs, model_params, read_video_request, resolve_spec
from jobservice.http.api.openai.thumbnail import thumbnail_of
from jobservice.http.api.openai.view import (
    REMIX_DETAIL,
    VideoDeleted,
    VideoList,
    openai_error_body,
    page_of_videos,
    quoted,
    remix_sources,
    video_view,
)
from jobservice.http.api.policy.auth import current_principal
from jobservice.jobs.idempotency import parse_idempotency_key
from jobservice.jobs.lookup import job_of
from jobservice.jobs.submit import Submission, resubmit_job, submit_job
from jobservice.retention.deletion import delete_job
from jobservice.storage import ObjectNotFound
from jobservice.uploads.service import checked_upload

bp = Blueprint("openai_videos", __name__, url_prefix="/v1")
api = RouteTable(bp)

SOURCE = "openai"  # Job.source of videos created here (a label of the jobs metrics)
POLL_HEADER = "openai-poll-after-ms"  # read by the SDK's videos.poll / create_and_poll
MAX_REMIX_BYTES = 64 * 1024
# A file sent as a data: URL form field (the SDK's extra_body) is held in memory, unlike a file part:
# 16 MB of base64 is 12 MB of audio (minutes of speech); larger files go as parts.
MAX_DATA_URL_FIELD_BYTES = 16 * 2**20


def _openai_refusal(error: Exception) -> Response:
    if isinstance(error, RequestEntityTooLarge):
        refusal: DomainError = TooLarge(
            "payload_too_large",
            "The request is over a limit: its size, one form field's (16 MB for a data: URL; send "
            "large files as file parts), or the number of form fields.",
        )
    elif isinstance(error, HTTPException):
        status = error.code or 500
        refusal = DomainError(HTTP_CODES.get(status, "http_error"), error.description or error.name)
        refusal.status = status
    else:
        refusal = refusal_of(error)
    status = 400 if refusal.status == 422 else refusal.status  # OpenAI answers bad values with 400
    response = jsonify(openai_error_body(refusal, status))
    response.status_code = status
    response.headers.update(refusal.headers)
    return response


bp.register_error_handler(Exception, _openai_refusal)
bp.register_error_handler(413, _openai_refusal)  # the app's own 413 handler would answer first


@bp.after_app_request
def _routing_refusal_in_openai_shape(response: Response) -> Response:
    """A refusal under /v1 that no route of this blueprint answered (an unknown path, a method a
    route does not take: routing fails before the blueprint's handlers apply) in OpenAI's shape."""
    if not request.path.startswith("/v1/") or response.status_code < 400 or not response.is_json:
        return response
    body = response.get_json(silent=True)
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and "type" not in error and isinstance(error.get("code"), str):
        refusal = DomainError(error["code"], str(error.get("message") or error["code"]))
        response.set_data(json.dumps(openai_error_body(refusal, response.status_code)))
    return response


def load_video(raw_id: str) -> Job:
    """The job named in the URL if the caller may see it (another tenant's is a 404 too)."""
    missing = NotFound("video_not_found", f"There is no video '{quoted(raw_id)}'.", field="video_id")
    row = owned_row(services().db, raw_id, current_principal(), missing=missing)
    if row.deleted_at is not None:  # gone, as from OpenAI's API (the native API says job_deleted)
        raise missing
    return job_of(row)


def files_of_video(job: Job) -> Job:
    """``job`` if its files still exist; 410 ``expired`` once retention removed them."""
    return files_of(job, noun="Video")


def render(job: Job, *, remixed_from: str | None = None, look_up: bool = True) -> Response:
    """The video object of ``job``, with the SDK's polling hint while it is unfinished (``look_up``:
    find the video it remixes, if any, unless ``remixed_from`` says)."""
    if remixed_from is None and look_up:
        with services().db.session() as session:
            remixed_from = remix_sources(session, [job.id]).get(job.id)
    forecast = latest_forecast(services())
    with services().db.reading() as conn:
        behind = behind_of(conn, forecast, job)
    view = video_view(job, remixed_from=remixed_from, forecast=forecast, behind=behind)
    response = jsonify(view.model_dump(mode="json"))
    if not JobStatus(job.status).is_terminal:
        response.headers[POLL_HEADER] = POLL_AFTER_MS
    return response


@api.route(
    "post",
    "/v1/videos",
    "Create a video (OpenAI Videos API; vLLM-Omni form fields)",
    parameters=(idempotency_key({"type": "string", "maxLength": 255}),),
    body=create_body,
    responses={"200": answer("The new video (or an idempotent replay).", "VideoView"), **VIDEO_REFUSALS},
)
def create_video() -> Response:
    """Create a video: a job of the named catalog model (200 with the video object)."""
    svc = services()
    key = parse_idempotency_key(request.headers.get("Idempotency-Key"))
    request.max_form_memory_size = MAX_DATA_URL_FIELD_BYTES
    read = read_video_request(request, svc.settings)
    try:
        for target, (name, upload_id) in read.file_ids.items():  # direct uploads (POST /uploads)
            try:
                read.uploads[target] = checked_upload(svc, current_principal(), upload_id, target)
            except DomainError as exc:
                exc.field = name
                raise
        spec = resolve_spec(svc, read.fields.get("model"), read.uploads)
        check_inputs(spec, read.uploads)
        sub = Submission(
            task=None,
            model=spec.id,
            params=model_params(spec, read.fields),
            uploads=read.uploads,
            source=SOURCE,
            idempotency_key=key,
            principal=current_principal(),
        )
        job, created = submit_job(svc, sub)
    finally:
        read.close()
    response = render(job, look_up=not created)
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    return response


@api.route(
    "get",
    VIDEO,
    "A video",
    parameters=(in_path("video_id"),),
    responses={"200": answer("The video.", "VideoView"), "404": NO_VIDEO},
)
def retrieve_video(video_id: str) -> Response:
    """The video object."""
    return render(load_video(video_id))


def _list_args() -> tuple[int, str, str | None]:
    raw_limit = request.args.get("limit", "20")
    if not raw_limit.isascii() or not raw_limit.isdecimal() or not 1 <= int(raw_limit) <= 100:
        raise Invalid("invalid_limit", "limit must be a whole number from 1 to 100.", field="limit")
    order = request.args.get("order", "desc")
    if order not in ("asc", "desc"):
        raise Invalid("invalid_order", "order must be asc or desc.", field="order")
    return int(raw_limit), order, request.args.get("after") or None


@api.route(
    "get",
    "/v1/videos",
    "List videos (cursor: after, limit, order)",
    parameters=(
        in_query("after"),
        in_query("limit", {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}),
        in_query("order", {"type": "string", "enum": ["asc", "desc"], "default": "desc"}),
    ),
    responses={
        "200": answer("A page of videos.", "VideoList"),
        "400": refused("Bad limit, order or after."),
    },
)
def list_videos() -> Response:
    """The caller's videos (every job of its tenant), newest first unless ``order=asc``; a page
    continues ``after`` a video id."""
    limit, order, after_id = _list_args()
    after = None
    if after_id is not None:
        try:
            after = load_video(after_id)
        except NotFound:
            raise Invalid(
                "invalid_after", f"'after' names no video of yours: '{quoted(after_id)}'.", field="after"
            ) from None
    with services().db.session() as session:
        rows, has_more = page_of_videos(
            session, tenant=current_principal().scope(), after=after, limit=limit, order=order
        )
        sources = remix_sources(session, [job.id for job in rows])
        forecast = latest_forecast(services())
        data = [
            video_view(
                job,
                remixed_from=sources.get(job.id),
                forecast=forecast,
                behind=behind_of(session, forecast, job),
            )
            for job in rows
        ]
    page = VideoList(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=has_more,
    )
    return jsonify(page.model_dump(mode="json"))


@api.route(
    "delete",
    VIDEO,
    "Delete a video: cancel it if unfinished, delete its files once ended; then it is gone (404)",
    parameters=(in_path("video_id"),),
    responses={
        "200": answer("Deleted.", "VideoDeleted"),
        "404": NO_VIDEO,
        "409": refused(
            "Still stopping (cancel_pending), or part of a batch (in_batch) or a group (in_group)."
        ),
        "503": refused("The object store is unavailable."),
    },
)
def delete_video(video_id: str) -> Response:
    """Delete the video as ``DELETE /jobs/<id>`` does: a later retrieve, list, content, remix or
    delete answers 404, as OpenAI's API does."""
    job = load_video(video_id)
    delete_job(services(), job, actor=current_principal().actor)
    return jsonify(VideoDeleted(id=str(job.id), deleted=True).model_dump(mode="json"))


@api.route(
    "get",
    VIDEO + "/content",
    "The MP4, or a JPEG thumbnail (variant=thumbnail)",
    parameters=(
        in_path("video_id"),
        in_query("variant", {"type": "string", "enum": ["video", "thumbnail"], "default": "video"}),
    ),
    responses={
        "200": {"description": "MP4 or JPEG", "content": {"video/mp4": {}, "image/jpeg": {}}},
        "206": {"description": "Partial content", "content": {"video/mp4": {}}},
        "302": answer("Redirect to a presigned URL"),
        "400": refused("Unknown variant."),
        "404": refused("No such video, or no content (not completed)."),
        "410": refused("Its files were deleted by retention (a deleted video is a 404)."),
        "503": refused("The object store or ffmpeg is unavailable."),
    },
)
def video_content(video_id: str) -> Any:
    """The MP4 (``variant=video``, the default) or a JPEG thumbnail (``variant=thumbnail``)."""
    variant = request.args.get("variant", "video")
    if variant not in ("video", "thumbnail"):
        raise Invalid("invalid_variant", "variant must be video or thumbnail.", field="variant")
    job = files_of_video(load_video(video_id))
    status = JobStatus(job.status)
    if status != JobStatus.SUCCEEDED or not job.output_key:
        state = video_view(job).status
        raise NotFound("video_not_ready", f"Video {job.id} has no content: it is {state}.")
    if variant == "video":
        return job_video(str(job.id))
    try:
        data = thumbnail_of(services(), job)
    except ObjectNotFound:
        raise NotFound("video_missing", "The video is recorded but missing from the object store.") from None
    return Response(data, mimetype="image/jpeg", headers={"Cache-Control": "max-age=3600"})


@api.route(
    "post",
    VIDEO + "/remix",
    "Remix: a new video with the same model, inputs and seed, and a new prompt",
    parameters=(in_path("video_id"),),
    body=remix_body,
    responses={
        "200": answer("The new video.", "VideoView"),
        "400": refused("No prompt, or the model takes none (remix_unsupported)."),
        "404": NO_VIDEO,
        "409": refused("Its inputs are gone from the store."),
        "410": refused("Its files were deleted by retention (a deleted video is a 404)."),
        "413": refused("Request too large."),
        "415": refused("Unsupported content type."),
        "503": refused("A dependency is unavailable."),
        "507": refused("Too little free space."),
    },
)
def remix_video(video_id: str) -> Response:
    """A new video: the same model, inputs and parameters (seed too) with a new prompt."""
    source = files_of_video(load_video(video_id))
    prompt = _remix_prompt()
    spec = services().catalog.get(source.model)
    if spec is None or "prompt" not in spec.params.model_fields:
        raise Invalid(
            "remix_unsupported",
            f"Model '{source.model}' takes no prompt, so it cannot remix.",
            field="prompt",
        )
    principal = current_principal()
    key = parse_idempotency_key(request.headers.get("Idempotency-Key"))
    job = resubmit_job(
        services(),
        source,
        source=SOURCE,
        principal=principal,
        overrides={"prompt": prompt},
        idempotency_key=key,
    )
    with services().db.session() as session:
        session.add(
            JobEvent(job_id=job.id, attempt=0, detail=f"{REMIX_DETAIL}{source.id}", actor=principal.actor)
        )
    return render(job, remixed_from=str(source.id))


def _remix_prompt() -> str:
    if request.mimetype == "application/json":
        too_large = TooLarge("payload_too_large", "A remix request is a prompt, at most 64 KB.")
        body: dict[str, Any] = json_object(read_body(request, limit=MAX_REMIX_BYTES, too_large=too_large))
    elif request.mimetype in FORM_TYPES:
        if len(request.form.getlist("prompt")) > 1:
            raise Invalid("invalid_parameters", "Send one 'prompt', not several.", field="prompt")
        body = request.form.to_dict()
    else:
        raise Unsupported(
            "unsupported_media_type", "Send a remix as application/json (or a form) with a 'prompt'."
        )
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise Invalid("missing_prompt", "A remix needs a new 'prompt'.", field="prompt")
    return prompt
