"""What the ``/v1/videos`` routes read and answer in ``/openapi.json`` (their declarations are on the
views, ``openai.videos``): the request bodies, the refusals and the response models."""

from __future__ import annotations

from pydantic import BaseModel

from jobservice.catalog import Catalog
from jobservice.http.api.doc import Schema, refused
from jobservice.http.api.openai.view import VideoDeleted, VideoList, VideoView

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
# A direct upload (POST /uploads) named by its id.
FILE_ID: Schema = {
    "type": "object",
    "properties": {"file_id": {"type": "string", "description": "A ready upload's id (POST /uploads)."}},
}
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


def create_body(_catalog: Catalog) -> Schema:
    """Multipart as the SDK and vLLM-Omni's examples send it; JSON with files as data URLs."""
    form = {
        "input_reference": {**FILE, "description": "The portrait (audio2video)."},
        "audio": FILE,
        "input_reference[file_id]": {"type": "string", "description": "The portrait as an upload id."},
        **REFERENCES,
    }
    json = {
        "input_reference": {"anyOf": [DATA_URL, FILE_ID]},
        "audio": {"anyOf": [DATA_URL, FILE_ID]},
        **REFERENCES,
    }
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


def remix_body(_catalog: Catalog) -> Schema:
    """A remix's body: the new prompt, as JSON or a form."""
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
