"""``/job-groups``: submit many jobs from one manifest, follow them together, collect what they made.

``POST /job-groups`` takes a CSV or JSON Lines manifest (the body as ``text/csv`` or
``application/x-ndjson``, or a ``manifest`` file part of a multipart form), checks every row as
``POST /jobs`` checks one job and creates all of them in one transaction, or none: a manifest with
a problem anywhere is a 422 ``invalid_manifest`` whose ``details`` name each row and column. The
group is then read (progress by status), listed, canceled, followed live (``/stream``, in
``streams``), and collected as a CSV of results and a zip of its videos, both streamed. Another
tenant's group is a 404, as another tenant's job is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from pathlib import PurePosixPath

from flask import Blueprint, Response, request
from werkzeug.datastructures import FileStorage

from jobservice.auth.owned import load_owned
from jobservice.catalog import Catalog
from jobservice.db.tables import JobGroup
from jobservice.errors import Invalid, NotFound, TooLarge, Unsupported
from jobservice.groups.manifest import CSV_TYPES, JSONL_TYPES, Format, manifest_format, read_manifest
from jobservice.groups.plan import check_rows
from jobservice.groups.presenters import group_view, list_groups
from jobservice.groups.results import outputs_zip, results_csv
from jobservice.groups.service import (
    admit_group,
    cancel_group,
    create_group,
    replay_of,
)
from jobservice.groups.views import GroupList, GroupView
from jobservice.http.api.bodies import read_body
from jobservice.http.api.doc import (
    RouteTable,
    Schema,
    answer,
    in_path,
    in_query,
    refused,
)
from jobservice.http.api.native.jobs import services
from jobservice.http.api.native.sets import (
    BAD_CURSOR,
    CREATION_KEY,
    SetRoutes,
    answer_created,
    creation_responses,
    parse_limit,
)
from jobservice.http.api.policy.auth import current_principal
from jobservice.jobs.idempotency import parse_idempotency_key
from jobservice.media.uploads import spool_of
from jobservice.webhooks.targets import check_webhook

bp = Blueprint("groups", __name__)
api = RouteTable(bp)

GROUP_MODELS = (GroupView, GroupList)
GROUP = "/job-groups/{group_id}"
READS = SetRoutes(api, GROUP, noun="job group", view="GroupView")  # its reads are declared at the end
NO_GROUP = READS.missing
MANIFEST_PART = "manifest"
MAX_NAME = 128


def _manifest_body(_catalog: Catalog) -> Schema:
    text = {"schema": {"type": "string"}}
    form = {
        "type": "object",
        "required": [MANIFEST_PART],
        "properties": {
            MANIFEST_PART: {
                "type": "string",
                "format": "binary",
                "description": "The CSV or JSON Lines file.",
            },
            "name": {"type": "string", "maxLength": MAX_NAME, "description": "A name for the group."},
        },
    }
    return {"text/csv": text, "application/x-ndjson": text, "multipart/form-data": {"schema": form}}


def load_group(raw_id: str) -> JobGroup:
    """The group named in the URL if the caller may see it (another tenant's group is a 404)."""
    missing = NotFound("group_not_found", f"There is no job group '{raw_id}'.")
    return load_owned(raw_id, current_principal(), partial(services().db.get, JobGroup), missing=missing)


def render(group: JobGroup, status: int = 200) -> Response:
    """A group's view, with a polling hint while it runs."""
    with services().db.session() as session:
        view = group_view(session, group)
    response = Response(view.model_dump_json() + "\n", status=status, mimetype="application/json")
    if view.status not in ("finished", "canceled"):
        response.headers["X-Poll-After-Ms"] = "2000"
    return response


def _sent(name: str) -> list[FileStorage]:
    """The file parts named ``name`` that hold a file (an HTML form sends an empty part for an
    empty file input)."""
    return [part for part in request.files.getlist(name) if part.filename or spool_of(part).size]


def manifest_of_request() -> tuple[bytes, Format, str]:
    """The manifest a request carries: its bytes, its format and its file name ("" for a body)."""
    limit = services().settings.group_manifest_max_mb * 2**20
    too_large = TooLarge(
        "manifest_too_large", f"The manifest is larger than {limit // 2**20} MB; split it into groups."
    )
    if request.mimetype == "multipart/form-data":
        unexpected = [name for name in request.files if name != MANIFEST_PART and _sent(name)]
        if unexpected:
            raise Invalid(
                "unexpected_file",
                f"Send one file part, '{MANIFEST_PART}'; inputs are named in it (key:<object key>), "
                f"not sent beside it ('{unexpected[0][:40]}').",
                field=unexpected[0][:40],
            )
        parts = _sent(MANIFEST_PART)
        if len(parts) != 1:
            raise Invalid("missing_manifest", f"Send the manifest as one file part named '{MANIFEST_PART}'.")
        spool = spool_of(parts[0])
        if spool.size > limit:
            raise too_large
        spool.seek(0)
        data = spool.read()
        filename = parts[0].filename or ""
        return data, manifest_format(parts[0].mimetype, filename, data), filename
    if request.mimetype in CSV_TYPES | JSONL_TYPES:
        data = read_body(request, limit=limit, too_large=too_large)
        return data, manifest_format(request.mimetype, None, data), ""
    raise Unsupported(
        "unsupported_media_type",
        "Send the manifest as text/csv, as application/x-ndjson (JSON Lines), or as a multipart/form-data "
        f"file part named '{MANIFEST_PART}'.",
    )


def group_name_of_request(filename: str) -> str:
    """The name the request gives the group (a form's ``name``, a body's ``?name=``), else the
    manifest file's name without its suffix."""
    raw = request.form.get("name") if request.mimetype == "multipart/form-data" else request.args.get("name")
    name = (raw or PurePosixPath(filename.replace("\\", "/")).stem).strip()
    if len(name) > MAX_NAME or "\x00" in name:
        raise Invalid("invalid_name", f"A group's name is at most {MAX_NAME} characters.", field="name")
    return name


@api.route(
    "post",
    "/job-groups",
    "Submit a job group: one job per row of a CSV or JSON Lines manifest, all created or none",
    parameters=(
        CREATION_KEY,
        in_query("name", {"type": "string", "maxLength": MAX_NAME}, description="A name (body manifests)."),
        in_query(
            "webhook",
            {"type": "string", "format": "uri"},
            description="An https URL told group.started and group.completed (or a form field).",
        ),
        in_query(
            "webhook_events_filter",
            {"type": "string"},
            description="Which of them: start, completed, or both (comma-separated; default both).",
        ),
    ),
    body=_manifest_body,
    responses=creation_responses(
        "GroupView",
        "Created; its jobs are queued at batch priority.",
        "Idempotent replay of an earlier submission.",
        {
            "400": "A bad Idempotency-Key.",
            "409": "Idempotency-Key reused for another manifest.",
            "413": "The manifest is larger than group_manifest_max_mb (manifest_too_large).",
            "415": "Not CSV, JSON Lines or a multipart form with a manifest.",
            "422": "A problem in the manifest (invalid_manifest: details name each row and column).",
        },
    ),
)
def create() -> Response:
    """Check every row, then create the group and all its jobs: 202, or 200 for a replay."""
    svc = services()
    principal = current_principal()
    data, fmt, filename = manifest_of_request()
    name = group_name_of_request(filename)
    key = parse_idempotency_key(request.headers.get("Idempotency-Key"))
    settings = svc.settings
    fields = request.form if request.mimetype == "multipart/form-data" else request.args
    webhook = check_webhook(
        fields.get("webhook"), fields.get("webhook_events_filter"), settings.webhook_allowed_hosts
    )
    manifest = read_manifest(
        data, fmt, max_bytes=settings.group_manifest_max_mb * 2**20, max_rows=settings.group_max_rows
    )
    replay = replay_of(svc, key, principal=principal, manifest_sha256=manifest.sha256)
    if replay is None:
        admit_group(svc, principal=principal, rows=len(manifest.rows) + len(manifest.problems))
        with check_rows(svc, manifest, principal=principal) as plan:
            group, created = create_group(
                svc, plan, principal=principal, source="api", name=name, idempotency_key=key, webhook=webhook
            )
    else:
        group, created = replay, False
    response = render(group, 202 if created else 200)
    return answer_created(response, svc, group.id, location=f"/job-groups/{group.id}", created=created)


@api.route(
    "get",
    "/job-groups",
    "Job groups, newest first",
    parameters=(
        in_query("limit", {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}),
        in_query("cursor"),
        in_query("tenant", description="Admins: one tenant's groups."),
    ),
    responses={
        "200": answer("A page of groups.", "GroupList"),
        "400": BAD_CURSOR,
        "422": refused("Bad limit."),
    },
)
def index() -> Response:
    """The caller's groups (an admin's: everyone's, or one tenant's), newest first, a page at a time."""
    limit = parse_limit(request.args.get("limit", "20"))
    principal = current_principal()
    tenant = principal.scope() or request.args.get("tenant") or None
    with services().db.session() as session:
        page = list_groups(session, tenant=tenant, limit=limit, cursor=request.args.get("cursor") or None)
    return Response(page.model_dump_json() + "\n", mimetype="application/json")


def _base_url() -> str:
    return services().settings.public_base_url or request.url_root


def _download(
    file: str,
    summary: str,
    what: str,
    mimetype: str,
    stream: Callable[[JobGroup], Iterable[str] | Iterable[bytes]],
) -> None:
    """``GET GROUP/<file's stem>``: ``stream(group)`` sent as the attachment ``group-<id>-<file>``,
    streamed as it is read: nothing buffered, nothing cached."""
    suffix = PurePosixPath(file).stem
    schema: Schema = {"type": "string"}
    if not mimetype.startswith("text/"):
        schema["format"] = "binary"

    def download(group_id: str) -> Response:
        group = load_group(group_id)
        body = Response(stream(group), mimetype=mimetype)
        body.headers["Content-Disposition"] = f'attachment; filename="group-{group.id}-{file}"'
        body.headers["Cache-Control"] = "no-store"
        body.headers["X-Accel-Buffering"] = "no"
        return body

    download.__name__ = suffix  # the endpoint's name: "results", "outputs"
    answers = {"200": {"description": what, "content": {mimetype: {"schema": schema}}}, "404": NO_GROUP}
    api.route("get", f"{GROUP}/{suffix}", summary, parameters=(in_path("group_id"),), responses=answers)(
        download
    )


# The results CSV (the jobs' states now) and the zip of the videos, entry by entry, chunk by chunk.
_download(
    "results.csv",
    "The group's results as CSV: row, job_id, model, status, verdict, video_url, card_seconds, error",
    "One line per row, streamed.",
    "text/csv",
    lambda group: results_csv(services().db, group.id, _base_url()),
)
_download(
    "outputs.zip",
    "A zip of the group's videos (succeeded jobs) and results.csv, streamed",
    "row-<n>-<job id>.mp4 per succeeded job, then results.csv; streamed.",
    "application/zip",
    lambda group: outputs_zip(services().db, services().store, group.id, _base_url()),
)


READS.declare_reads(load=load_group, render=render, cancel=cancel_group, default_limit=100)
