"""``/uploads``: direct uploads. Declare a file, PUT its bytes where the answer says (presigned S3
URLs, or this API with the local store), complete it; jobs then name it by id; delete it once done
(``jobservice.uploads``)."""

from __future__ import annotations

from flask import Blueprint, Response, request

from jobservice.errors import TooLarge
from jobservice.http.api.bodies import json_object, read_body
from jobservice.http.api.doc import RouteTable, answer, follow, in_path, refused
from jobservice.http.api.native.jobs import services
from jobservice.http.api.policy.auth import current_principal
from jobservice.uploads import service
from jobservice.uploads.service import MAX_PARTS, Declaration
from jobservice.uploads.views import UploadView

bp = Blueprint("uploads", __name__)
api = RouteTable(bp)

MAX_DECLARATION_BYTES = 4096
UPLOAD_MODELS = (UploadView,)
UPLOAD = "/uploads/{upload_id}"
NO_UPLOAD = refused("No such upload (another tenant's is none either), or it expired (upload_expired: 410).")
DECLARATION = {
    "application/json": {
        "schema": {
            "type": "object",
            "required": ["filename", "size", "content_type"],
            "additionalProperties": False,
            "properties": {
                "filename": {"type": "string", "minLength": 1, "maxLength": 255},
                "size": {"type": "integer", "minimum": 1, "description": "Bytes."},
                "content_type": {
                    "type": "string",
                    "description": "image/png, image/jpeg, image/webp, audio/wav, audio/mpeg, audio/flac, "
                    "audio/ogg or audio/mp4; the file is checked by its content on completion.",
                },
                "part_size": {
                    "type": "integer",
                    "minimum": 5 * 2**20,
                    "maximum": 5 * 2**30,
                    "description": f"Parts of this many bytes (at most {MAX_PARTS} parts); default: one "
                    "PUT up to JOBSERVICE_UPLOAD_MULTIPART_THRESHOLD_MB, parts of "
                    "JOBSERVICE_UPLOAD_PART_MB above.",
                },
            },
        }
    }
}
UPLOAD_LINKS = follow(("post", UPLOAD + "/complete"), upload_id="$response.body#/id")


def _json(response: UploadView, status: int = 200) -> Response:
    return Response(response.model_dump_json() + "\n", status=status, mimetype="application/json")


@api.route(
    "post",
    "/uploads",
    "Declare a file to upload: answers where to PUT it (one URL, or one per part)",
    body=lambda _catalog: DECLARATION,
    responses={
        "201": {
            **answer("Declared; PUT each part to its url, then POST complete_url.", "UploadView"),
            **UPLOAD_LINKS,
        },
        "400": refused("Not a JSON object (invalid_json)."),
        "413": refused("Larger than the kind's limit (file_too_large)."),
        "415": refused("Not a content type any job takes (unsupported_content_type)."),
        "422": refused("A bad filename, size or part_size (invalid_*, too_many_parts, unexpected_field)."),
        "429": refused(
            "Over the tenant's pending uploads (quota_exceeded: pending_uploads, pending_upload_mb; "
            "complete or delete some), or the key's request rate (rate_limited); see Retry-After."
        ),
        "503": refused("The object store is unavailable."),
    },
)
def declare_upload() -> Response:
    """Record the declared file and answer where its bytes go."""
    too_large = TooLarge(
        "payload_too_large", f"A declaration is at most {MAX_DECLARATION_BYTES} bytes of JSON."
    )
    body = json_object(read_body(request, limit=MAX_DECLARATION_BYTES, too_large=too_large))
    decl: Declaration = service.parse_declaration(body, services().settings)
    view = service.declare(services(), current_principal(), decl)
    response = _json(view, 201)
    response.headers["Location"] = f"/uploads/{view.id}"
    return response


@api.route(
    "get",
    UPLOAD,
    "An upload",
    parameters=(in_path("upload_id"),),
    responses={"200": answer("The upload.", "UploadView"), "404": NO_UPLOAD, "410": NO_UPLOAD},
)
def show_upload(upload_id: str) -> Response:
    """The upload's view (no part URLs)."""
    return _json(service.view_of(service.load_upload(services(), current_principal(), upload_id)))


@api.route(
    "put",
    UPLOAD + "/parts/{number}",
    "One part of an upload, PUT to the API itself (local store only; S3 takes parts at presigned URLs)",
    parameters=(
        in_path("upload_id"),
        {"name": "number", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1}},
    ),
    body=lambda _catalog: {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    responses={
        "200": answer("Stored; the ETag header names the part."),
        "404": refused("No such upload or part."),
        "409": refused("Completed already, or its parts go to the object store (upload_direct_to_store)."),
        "410": refused("The upload expired."),
        "413": refused("Larger than the part."),
        "422": refused("Not the part's declared size (part_size_mismatch)."),
    },
)
def put_part(upload_id: str, number: str) -> Response:
    """Stream one part's bytes into the store."""
    principal = current_principal()
    length = request.content_length
    if length is not None:
        # Never read past what the part may hold, whatever the app's request limit.
        request.max_content_length = length
    part = service.receive_part(services(), principal, upload_id, number, request.stream, length)
    response = Response(status=200)
    response.headers["ETag"] = f'"{part.etag}"'
    return response


@api.route(
    "post",
    UPLOAD + "/complete",
    "Complete an upload: join its parts and check it by content; answers it ready for jobs",
    parameters=(in_path("upload_id"),),
    responses={
        "200": answer("Ready: name its id as a job's image or audio.", "UploadView"),
        "404": NO_UPLOAD,
        "409": refused("Parts missing or short (upload_incomplete)."),
        "410": refused("The upload expired."),
        "413": refused("Larger than the kind's limit."),
        "415": refused("Not a type any job takes (unsupported_image_type, unsupported_audio_type)."),
        "422": refused("Refused by its content check (invalid_image, audio_too_long, ...) or its size."),
        "503": refused("The object store or the media tools are unavailable."),
    },
)
def complete_upload(upload_id: str) -> Response:
    """Join and check the upload; a refused file is deleted with its record."""
    return _json(service.complete(services(), current_principal(), upload_id))


@api.route(
    "delete",
    UPLOAD,
    "Delete an upload, pending or ready: its parts and object go; jobs that used it keep their copies",
    parameters=(in_path("upload_id"),),
    responses={
        "204": answer("Deleted: the id is now unknown everywhere (404)."),
        "404": refused("No such upload (another tenant's is none either), or deleted already."),
        "503": refused("The object store is unavailable: nothing was deleted; DELETE again."),
    },
)
def delete_upload(upload_id: str) -> Response:
    """Abort its unfinished parts, delete its object and its record."""
    service.delete_upload(services(), current_principal(), upload_id)
    return Response(status=204)
