"""Reading ``POST /v1/videos`` into the same ``Submission`` that ``POST /jobs`` builds.

OpenAI's fields map onto a catalog model's parameters: ``model`` is the catalog id, ``size`` ("WxH")
sets ``width``/``height`` and ``seconds`` sets ``num_frames`` at the model's ``fps`` (the nearest
count the model accepts, e.g. 4k+1 for Wan). vLLM-Omni's extra form fields (``num_frames``, ``fps``,
``num_inference_steps``, ``guidance_scale``, ``seed``, ``negative_prompt``, ``flow_shift``...) pass
through as the model's parameters; as on vLLM-Omni, ``num_frames`` wins over ``seconds`` and ``size``
over ``width``/``height``. Files: ``input_reference`` is the portrait (``image``) and ``audio`` the
speech, each a file part or a base64 ``data:`` URL field (the form the official SDK can send through
``extra_body``), or vLLM-Omni's ``image_reference``/``audio_reference`` objects (``{"image_url":
"data:..."}``, JSON text in a form); every file goes through the same content checks as on ``/jobs``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from annotated_types import Ge, Le, MultipleOf
from flask import Request
from pydantic import ValidationError

from jobservice.catalog import ModelSpec
from jobservice.errors import DomainError, Invalid, NotFound, TooLarge, Unsupported
from jobservice.http.api.bodies import json_object, read_body
from jobservice.http.api.native.submission import FORM_TYPES
from jobservice.http.api.openai.view import quoted
from jobservice.http.api.openai.vllm import vllm_omni_extras
from jobservice.jobs import retries
from jobservice.media.uploads import FILE_CHECKS, CheckedUpload, SpoolFile, spool_of
from jobservice.settings import Settings
from jobservice.wiring import Services

FILE_FIELDS = {
    "input_reference": "image",
    "image": "image",
    "audio": "audio",
    "image_reference": "image",  # vLLM-Omni: {"image_url": ...}, as JSON text in a form field
    "audio_reference": "audio",  # vLLM-Omni: {"audio_url": ...}
}
# The URL key of each reference object (OpenAI's input_reference object, vLLM-Omni's references).
URL_KEYS = {"input_reference": "image_url", "image_reference": "image_url", "audio_reference": "audio_url",
            "image": "image_url", "audio": "audio_url"}  # fmt: skip
IGNORED_FIELDS = {"user"}  # OpenAI's end-user id: nothing of ours to set from it
# Left in the parameters: check_submission takes the webhook fields (jobservice.webhooks) and the
# retry count (jobservice.jobs.retries) out.
PASSED_ON = ("webhook", "webhook_events_filter", retries.FIELD)
SIZE = re.compile(r"^\s*(\d{1,5})\s*[xX*]\s*(\d{1,5})\s*$")
DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+)?(;[\w=.+-]+)*;base64,", re.ASCII)
# A JSON body is parsed in memory, data: URLs and all: two 16 MB data URLs (as a form's fields may be)
# and the rest, rather than the request limit (256 MB of JSON is gigabytes once parsed and decoded).
MAX_JSON_BYTES = 33 * 2**20
NEAREST = (0, 1, -1, 2, -2, 3, -3)  # frame counts tried around seconds x fps, nearest first


@dataclass
class VideoRequest:
    """The fields and checked files of one ``POST /v1/videos``; ``spools`` hold decoded data URLs
    until the job's inputs are stored (close them after submitting)."""

    fields: dict[str, Any]
    uploads: dict[str, CheckedUpload] = field(default_factory=dict)
    spools: list[SpoolFile] = field(default_factory=list)
    # Files named by a direct upload's id (``{"file_id": ...}``): input -> (the field, the id).
    file_ids: dict[str, tuple[str, str]] = field(default_factory=dict)

    def close(self) -> None:
        """Delete the temporary files of decoded data URLs."""
        for spool in self.spools:
            spool.close()


def read_video_request(request: Request, settings: Settings) -> VideoRequest:
    """The body of ``POST /v1/videos``: JSON (files as data URLs) or a form (files as parts)."""
    if request.mimetype == "application/json":
        limit = min(settings.max_request_mb * 2**20, MAX_JSON_BYTES)
        too_large = TooLarge(
            "payload_too_large",
            f"A JSON request is at most {limit // 2**20} MB (files as data: URLs are held in memory); "
            "send large files as multipart file parts.",
        )
        read = VideoRequest(json_object(read_body(request, limit=limit, too_large=too_large)))
    elif request.mimetype in FORM_TYPES:
        read = VideoRequest(_form_fields(request))
        _form_files(request, settings, read)
    else:
        raise Unsupported(
            "unsupported_media_type", "Send POST /v1/videos as multipart/form-data or application/json."
        )
    try:
        for name, target in FILE_FIELDS.items():
            value = _reference_url(name, read.fields.pop(name, None))
            if value is None or value == "":
                continue
            if target in read.uploads or target in read.file_ids:
                raise Invalid(
                    "duplicate_input", f"Send the {target} once, as a file or as '{name}'.", field=name
                )
            if isinstance(value, FileId):
                read.file_ids[target] = (name, str(value))
                continue
            read.uploads[target] = _decoded_upload(name, target, value, settings, read)
    except DomainError:
        read.close()
        raise
    return read


class FileId(str):
    """The ``file_id`` of a reference object: a direct upload's id (``POST /uploads``)."""


def _reference_url(name: str, value: Any) -> Any:
    """The data: URL in a reference object: OpenAI's ``{"image_url": ...}`` input_reference, or
    vLLM-Omni's ``image_reference``/``audio_reference`` (an object, or its JSON text in a form field)."""
    if name in ("image_reference", "audio_reference") and isinstance(value, str) and value.strip():
        try:
            value = json.loads(value)
        except ValueError:
            example = json.dumps({URL_KEYS[name]: "data:..."})
            raise Invalid(
                "invalid_input", f"'{name}' must be a JSON object like {example}.", field=name
            ) from None
        if not isinstance(value, dict):
            raise Invalid(
                "invalid_input", f"'{name}' must be a JSON object, not {type(value).__name__}.", field=name
            )
    if not isinstance(value, dict):
        return value
    if value.get("file_id"):
        if not isinstance(value["file_id"], str):
            raise Invalid("invalid_input", f"'{name}': file_id must be an upload id (a string).", field=name)
        return FileId(value["file_id"])
    if not isinstance(value.get(URL_KEYS[name]), str):
        raise Invalid("invalid_input", f"'{name}' needs a '{URL_KEYS[name]}' (a data: URL).", field=name)
    return value[URL_KEYS[name]]


def _form_fields(request: Request) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key in request.form:
        values = request.form.getlist(key)
        if len(values) > 1:
            raise Invalid(
                "invalid_parameters", f"Parameter '{key}' was given {len(values)} times.", field=key
            )
        if "\x00" in values[0]:
            raise Invalid("invalid_text", f"'{key}' contains a NUL character.", field=key)
        name = "input_reference" if key == "input_reference[image_url]" else key
        if key == "input_reference[file_id]":
            fields["input_reference"] = {"file_id": values[0]}
            continue
        fields[name] = values[0]
    return fields


def _form_files(request: Request, settings: Settings, read: VideoRequest) -> None:
    for name in request.files:
        parts = request.files.getlist(name)
        if len(parts) > 1:
            raise Invalid("duplicate_input", f"Send one '{name}' file, not {len(parts)}.", field=name)
        target = FILE_FIELDS.get(name)
        if target is None:
            raise Invalid("unexpected_input", f"No model takes a file named '{name}'; send 'input_reference' "
                          "(the portrait) and 'audio'.", field=name)  # fmt: skip
        if target in read.uploads:
            raise Invalid("duplicate_input", f"Send the {target} once.", field=name)
        storage = parts[0]
        spool = spool_of(storage)
        if not storage.filename and spool.size == 0:
            continue
        read.uploads[target] = _checked(name, target, spool, settings)


def _checked(name: str, target: str, spool: SpoolFile, settings: Settings) -> CheckedUpload:
    try:
        return FILE_CHECKS[target](target, spool, settings)
    except DomainError as exc:
        exc.field = name
        raise


def _decoded_upload(
    name: str, target: str, value: Any, settings: Settings, read: VideoRequest
) -> CheckedUpload:
    """A file sent as a field: a ``data:<type>;base64,...`` URL (or bare base64), decoded and checked."""
    if not isinstance(value, str):
        raise Invalid("invalid_input", f"'{name}' must be a file or a base64 data: URL.", field=name)
    if value.startswith(("http://", "https://")):
        raise Invalid(
            "unsupported_reference", f"'{name}': URLs are not fetched; upload the file.", field=name
        )
    match = DATA_URL.match(value)
    try:
        data = base64.b64decode(value[match.end() if match else 0 :], validate=True)
    except (binascii.Error, ValueError):
        raise Invalid("invalid_input", f"'{name}' is not a file or valid base64 data.", field=name) from None
    limit = max(settings.max_image_mb, settings.max_audio_mb) * 2**20
    spool = SpoolFile(settings.resolved_spool_dir(), limit)
    read.spools.append(spool)
    spool.write(data)
    spool.flush()
    return _checked(name, target, spool, settings)


def resolve_spec(services: Services, model: Any, uploads: dict[str, CheckedUpload]) -> ModelSpec:
    """The catalog model a request names (404 when unknown), or the default for what it sends."""
    catalog = services.catalog
    if model is not None and not isinstance(model, str):
        raise Invalid("invalid_model", "'model' must be a string.", field="model")
    if not model:
        spec = catalog.default_for("audio2video" if "audio" in uploads else "text2video")
    else:
        spec = catalog.get(model)
    if spec is None:
        raise NotFound(
            "model_not_found",
            f"The model '{quoted(model)}' does not exist. Models: {', '.join(catalog.ids())}.",
            field="model",
        )
    return spec


def model_params(spec: ModelSpec, fields: dict[str, Any]) -> dict[str, Any]:
    """The model's parameters from OpenAI's and vLLM-Omni's fields (``model`` and files removed)."""
    params = {k: v for k, v in fields.items() if k not in IGNORED_FIELDS}
    params.pop("model", None)
    names = spec.params.model_fields
    vllm_omni_extras(params, names)
    if "prompt" not in names:
        params.pop("prompt", None)  # the SDK always sends one; an audio-driven model takes none
    _refuse_unknown(spec, params)
    size, seconds = params.pop("size", None), params.pop("seconds", None)
    if size not in (None, ""):
        _apply_size(spec, params, str(size))
    if seconds not in (None, ""):
        _apply_seconds(spec, params, str(seconds))
    return params


def _refuse_unknown(spec: ModelSpec, params: dict[str, Any]) -> None:
    """Refuse fields the model does not take, naming one (a body of thousands of made-up fields gets
    one short refusal, not one detail each)."""
    known = {*spec.params.model_fields, "size", "seconds", *PASSED_ON}
    unknown = [name for name in params if name not in known]
    if unknown:
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise Invalid(
            "invalid_parameters",
            f"Model '{spec.id}' takes no parameter '{quoted(unknown[0])}'{more}. It takes: "
            f"{', '.join(spec.params.model_fields)}.",
            field=quoted(unknown[0]),
        )


def _bounds(spec: ModelSpec, name: str) -> tuple[Any, Any, Any]:
    info = spec.params.model_fields[name]
    ge = next((m.ge for m in info.metadata if isinstance(m, Ge)), None)
    le = next((m.le for m in info.metadata if isinstance(m, Le)), None)
    step = next((m.multiple_of for m in info.metadata if isinstance(m, MultipleOf)), None)
    return ge, le, step


def problems_with(spec: ModelSpec, candidate: dict[str, Any], names: tuple[str, ...]) -> list[str]:
    """What the model's schema says about ``names`` in ``candidate`` (required text fields it lacks
    are filled in, so the model-wide rules run too)."""
    sample = {k: v for k, v in candidate.items() if k in spec.params.model_fields}
    for name, info in spec.params.model_fields.items():
        if info.is_required() and name not in sample:
            sample[name] = "x"
    try:
        spec.params.model_validate(sample)
    except ValidationError as exc:
        found = []
        for err in exc.errors(include_url=False, include_context=False):
            loc = err["loc"]
            if (loc and loc[0] in names) or (not loc and any(n in err["msg"] for n in names)):
                found.append(str(err["msg"]).removeprefix("Value error, "))
        return found
    return []


def _apply_size(spec: ModelSpec, params: dict[str, Any], size: str) -> None:
    names = spec.params.model_fields
    if "width" not in names or "height" not in names:
        raise Invalid(
            "invalid_size",
            f"Model '{spec.id}' takes no size: its frames follow its input"
            + (" (max_size sets the longest side)." if "max_size" in names else "."),
            field="size",
        )
    match = SIZE.match(size)
    if match is None:
        raise Invalid(
            "invalid_size", f"size must be WIDTHxHEIGHT, e.g. 512x320; got '{quoted(size)}'.", field="size"
        )
    # size wins over width/height, as on vLLM-Omni (its resolve_video_params)
    params["width"], params["height"] = int(match.group(1)), int(match.group(2))
    found = problems_with(spec, params, ("width", "height"))
    if found:
        ge, le, step = _bounds(spec, "width")
        default = f"{names['width'].default}x{names['height'].default}"
        allowed = f"width and height from {ge} to {le}" + (f" in multiples of {step}" if step else "")
        raise Invalid(
            "invalid_size",
            f"Model '{spec.id}' cannot make size '{quoted(size)}' ({found[0]}). Allowed: {allowed}; "
            f"default {default}.",
            field="size",
        )


def _apply_seconds(spec: ModelSpec, params: dict[str, Any], seconds: str) -> None:
    names = spec.params.model_fields
    if "num_frames" not in names or "fps" not in names:
        raise Invalid(
            "invalid_seconds",
            f"Model '{spec.id}' takes no seconds: the clip lasts as long as its audio.",
            field="seconds",
        )
    try:
        wanted = float(seconds)
    except ValueError:
        wanted = -1.0
    if not 0 < wanted < 3600:
        raise Invalid(
            "invalid_seconds", f"seconds must be a positive number; got '{quoted(seconds)}'.", field="seconds"
        )
    if "num_frames" in params:
        return  # an explicit frame count wins, as on vLLM-Omni
    try:
        fps = float(params.get("fps") or names["fps"].default)
    except (TypeError, ValueError):
        return  # a bad fps is refused, with its own message, by the model's schema
    if not math.isfinite(fps) or fps <= 0:
        return
    target = round(wanted * fps)
    for delta in NEAREST:
        if target + delta > 0 and not problems_with(
            spec, {**params, "num_frames": target + delta}, ("num_frames",)
        ):
            params["num_frames"] = target + delta
            return
    low, high, _ = _bounds(spec, "num_frames")
    rule = problems_with(spec, {**params, "num_frames": target}, ("num_frames",))
    span = f"from {low / fps:.2f} to {high / fps:.2f} s" if low and high else "other lengths"
    raise Invalid(
        "invalid_seconds",
        f"Model '{spec.id}' cannot make {quoted(seconds)} s at {fps:g} fps "
        f"({rule[0] if rule else 'out of range'}). "
        f"Allowed: {span} (num_frames {low}-{high} at {fps:g} fps).",
        field="seconds",
    )


def check_inputs(spec: ModelSpec, uploads: dict[str, CheckedUpload]) -> None:
    """Refuse missing or unexpected files in this API's words (``input_reference`` is the image)."""
    names = {"image": "input_reference", "audio": "audio"}
    missing = [names.get(name, name) for name in spec.inputs if name not in uploads]
    if missing:
        raise Invalid(
            "missing_input",
            f"Model '{spec.id}' needs {' and '.join(missing)}: input_reference is the portrait image, "
            "audio the speech (file parts, or base64 data: URLs as fields).",
            field=missing[0],
        )
    for name in uploads:
        if name not in spec.inputs:
            raise Invalid(
                "unexpected_input",
                f"Model '{spec.id}' takes no {names.get(name, name)}.",
                field=names.get(name, name),
            )
