"""The ``/v1/videos`` routes in ``/openapi.json`` (the OpenAI-compatible surface, ``openai_videos``)."""

from __future__ import annotations

from pydantic import BaseModel

from jobservice.catalog import Catalog
from jobservice.http.api.doc import Route, Schema, answer, idempotency_key, in_path, in_query, refused
from jobservice.http.api.openai_view import VideoDeleted, VideoList, VideoView

OPENAI_MODELS: tuple[type[BaseModel], ...] = (VideoView, VideoList, VideoDeleted)

VIDEO = "/v1/videos/{video_id}"
NO_VIDEO = refused("No such video.")
FIELDS: Schema = {
    "prompt": {"type": "string", "description": "What the clip shows (ignored by audio-driven models)."},
    "model": {"type": "string", "description": "A catalog model id (GET /models); else the task's default."},
    "size": {"type": "string", "description": "WIDTHxHEIGHT: the model's width and height."},
    "seconds": {"type": "string", "description": "Clip length: num_frames at the model's fps."},
}
FILE = {"type": "string", "format": "binary"}
DATA_URL = {"type": "string", "description": "A base64 data: URL (or bare base64) of the file."}
EXTRA = {"description": "Any other model parameter (num_frames, fps, seed, guidance_scale...)."}
# vLLM-Omni's reference fields: a JSON object (in a form, its JSON text) holding a data: URL.
REFERENCES: Schema = {
    "image_reference": {
        "type": "string",
        "description": 'vLLM-Omni: {"image_url": "data:..."} (the portrait).',
    },
    "audio_reference": {
        "type": "string",
        "description": 'vLLM-Omni: {"audio_url": "data:..."} (the speech).',
    },
}


def _create_body(_catalog: Catalog) -> Schema:
    """Multipart as the SDK and vLLM-Omni's examples send it; JSON with files as data URLs."""
    form = {
        "input_reference": {**FILE, "description": "The portrait (audio2video)."},
        "audio": FILE,
        **REFERENCES,
    }
    json = {"input_reference": DATA_URL, "audio": DATA_URL, **REFERENCES}
    return {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["prompt"],
                "properties": {**FIELDS, **form},
                "additionalProperties": {"type": "string", **EXTRA},
            }
        },
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["prompt"],
                "properties": {**FIELDS, **json},
                "additionalProperties": EXTRA,
            }
        },
    }


def _remix_body(_catalog: Catalog) -> Schema:
    schema = {"type": "object", "required": ["prompt"], "properties": {"prompt": {"type": "string"}}}
    return {"application/json": {"schema": schema}, "multipart/form-data": {"schema": schema}}


VIDEO_REFUSALS = {
    "400": refused(
        "A bad value: size, seconds or a parameter the model refuses (message names the allowed)."
    ),
    "404": refused("Unknown model (model_not_found)."),
    "409": refused("Idempotency-Key reused for a different request."),
    "413": refused("Upload too large."),
    "415": refused("Unsupported content or file type."),
    "503": refused("A dependency is unavailable."),
    "507": refused("Too little free space in the store or spool (insufficient_storage)."),
}
OPENAI_ROUTES: tuple[Route, ...] = (
    Route(
        "post",
        "/v1/videos",
        "Create a video (OpenAI Videos API; vLLM-Omni form fields)",
        parameters=(idempotency_key({"type": "string", "maxLength": 255}),),
        body=_create_body,
        responses={"200": answer("The new video (or an idempotent replay).", "VideoView"), **VIDEO_REFUSALS},
    ),
    Route(
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
    ),
    Route(
        "get",
        VIDEO,
        "A video",
        parameters=(in_path("video_id"),),
        responses={"200": answer("The video.", "VideoView"), "404": NO_VIDEO},
    ),
    Route(
        "delete",
        VIDEO,
        "Delete a video: cancel it if unfinished, delete its files once ended; then it is gone (404)",
        parameters=(in_path("video_id"),),
        responses={
            "200": answer("Deleted.", "VideoDeleted"),
            "404": NO_VIDEO,
            "409": refused("Still stopping (cancel_pending), or part of a batch (in_batch)."),
            "503": refused("The object store is unavailable."),
        },
    ),
    Route(
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
    ),
    Route(
        "post",
        VIDEO + "/remix",
        "Remix: a new video with the same model, inputs and seed, and a new prompt",
        parameters=(in_path("video_id"),),
        body=_remix_body,
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
    ),
)
