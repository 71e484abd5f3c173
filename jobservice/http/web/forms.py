"""The new-job form: fields drawn from the catalog, and submissions checked field by field.

A model's parameter fields come from its pydantic schema (defaults, limits, descriptions), so a
model added to the catalog gets a form without template changes. The form is read by the same
parser as ``POST /jobs`` (``jobservice.http.api.native.submission``) and checked once by ``check_submission``;
what differs is that every problem is shown, next to the input its ``field`` names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flask import request
from werkzeug.exceptions import RequestEntityTooLarge

from jobservice.catalog import ModelSpec
from jobservice.errors import DomainError
from jobservice.http.api.native.submission import FormRules, read_form
from jobservice.http.api.policy.auth import current_principal
from jobservice.jobs import retries
from jobservice.jobs.submit import Checked, Submission, check_submission
from jobservice.media.types import accept_attribute
from jobservice.settings import Settings
from jobservice.wiring import Services

FORM_LEVEL = "__all__"
CONTROL_FIELDS = frozenset({"csrf_token", "task", "model", "change_model"})
WEB_FORM = FormRules(ignore=CONTROL_FIELDS, last_value_wins=True)
# What the form says next to a file input left empty.
FILE_MISSING = {"image": "Choose a portrait image.", "audio": "Choose a speech file."}
TASKS = {
    "audio2video": "Talking head (audio2video)",
    "text2video": "Text to video (text2video)",
}
IMAGE_ACCEPT = accept_attribute("image")  # jobservice.media.types: the one table
AUDIO_ACCEPT = accept_attribute("audio")
# Error codes that belong to one field of the form.
CODE_FIELDS = {
    "unknown_model": "model",
    "model_task_mismatch": "model",
    "invalid_task": "task",
    "missing_task": "task",
}


class FormInvalid(Exception):
    """A submission the form refuses: messages by field name (``__all__`` for the whole form)."""

    def __init__(self, errors: dict[str, str], status: int = 422) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors
        self.status = status


@dataclass(frozen=True)
class ParamField:
    """One parameter input of a model's form."""

    name: str
    label: str
    kind: str  # "text" | "textarea" | "number" | "checkbox" | "select"
    required: bool = False
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    step: str | None = None
    max_length: int | None = None
    choices: tuple[str, ...] = ()
    description: str = ""
    hint: str = ""


@dataclass(frozen=True)
class FileField:
    """A file input of a model's form, with its client-side limits."""

    name: str
    label: str
    accept: str
    max_mb: int
    hint: str
    kind: str  # "image" | "audio"


@dataclass
class ModelForm:
    """Everything a template needs to draw the form for one model."""

    spec: ModelSpec
    files: list[FileField] = field(default_factory=list)
    params: list[ParamField] = field(default_factory=list)


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _hint(prop: dict[str, Any], required: bool, nullable: bool) -> str:
    parts: list[str] = []
    if required:
        parts.append("required")
    elif "default" in prop and prop["default"] not in (None, ""):
        parts.append(f"default {_number(prop['default'])}")
    elif nullable:
        parts.append("random if empty" if "seed" in prop.get("title", "").lower() else "optional")
    if "minimum" in prop and "maximum" in prop:
        parts.append(f"{_number(prop['minimum'])} to {_number(prop['maximum'])}")
    else:
        bounds = [
            f"{word} {_number(prop[key])}"
            for key, word in (
                ("minimum", "at least"),
                ("exclusiveMinimum", "above"),
                ("maximum", "at most"),
                ("exclusiveMaximum", "below"),
            )
            if key in prop
        ]
        if bounds:
            parts.append(", ".join(bounds))
    if "multipleOf" in prop:
        parts.append(f"a multiple of {_number(prop['multipleOf'])}")
    if "maxLength" in prop:
        parts.append(f"up to {prop['maxLength']} characters")
    return " · ".join(parts)


def param_fields(spec: ModelSpec) -> list[ParamField]:
    """The form inputs of ``spec``'s parameters, in schema order."""
    schema = spec.params.model_json_schema()
    required = set(schema.get("required", []))
    defs = schema.get("$defs", {})
    out: list[ParamField] = []
    for name, raw in schema.get("properties", {}).items():
        prop = dict(raw)
        nullable = False
        if "anyOf" in prop:  # Optional[X]: take X's constraints
            options = [o for o in prop["anyOf"] if o.get("type") != "null"]
            nullable = len(options) < len(prop["anyOf"])
            if options:
                prop = {**options[0], **{k: v for k, v in prop.items() if k != "anyOf"}}
        if "$ref" in prop:
            prop = {**defs.get(prop["$ref"].rsplit("/", 1)[-1], {}), **prop}
        kind, step = "text", None
        typ = prop.get("type")
        if "enum" in prop:
            kind = "select"
        elif typ == "integer":
            kind, step = "number", _number(prop.get("multipleOf", 1))
        elif typ == "number":
            kind, step = "number", "any"
        elif typ == "boolean":
            kind = "checkbox"
        elif typ == "string" and (name.endswith("prompt") or prop.get("maxLength", 0) > 200):
            kind = "textarea"
        out.append(
            ParamField(
                name=name,
                label=prop.get("title") or name.replace("_", " ").capitalize(),
                kind=kind,
                required=name in required,
                default=prop.get("default"),
                minimum=prop.get("minimum"),
                maximum=prop.get("maximum"),
                step=step,
                max_length=prop.get("maxLength"),
                choices=tuple(str(c) for c in prop.get("enum", ())),
                description=prop.get("description", ""),
                hint=_hint(prop, name in required, nullable),
            )
        )
    return out


def file_fields(spec: ModelSpec, settings: Settings) -> list[FileField]:
    """The file inputs ``spec`` needs, with the server's limits spelled out."""
    # kind: its label, the types it takes (the accept attribute, and in words), its size limit and
    # what else the server checks
    shown = {
        "image": (
            "Portrait image",
            IMAGE_ACCEPT,
            "PNG, JPEG or WebP",
            settings.max_image_mb,
            f"each side at least {settings.min_image_side} px",
        ),
        "audio": (
            "Speech audio",
            AUDIO_ACCEPT,
            "WAV, MP3, FLAC, OGG or M4A",
            settings.max_audio_mb,
            f"{settings.min_audio_seconds:g} to {settings.max_audio_seconds:g} seconds",
        ),
    }
    out: list[FileField] = []
    for name in spec.inputs:
        if name in shown:
            label, accept, types, max_mb, checked = shown[name]
            hint = f"{types} · up to {max_mb} MB · {checked}"
            out.append(FileField(name=name, label=label, accept=accept, max_mb=max_mb, hint=hint, kind=name))
    return out


def retry_field(spec: ModelSpec) -> list[ParamField]:
    """The retry count's input (jobservice.jobs.retries), for a model with a seed to vary."""
    if "seed" not in spec.params.model_fields:
        return []
    return [
        ParamField(
            name=retries.FIELD,
            label="Retries on a failed gate",
            kind="number",
            default=spec.retry_on_validation_failure,
            minimum=0,
            maximum=retries.MAX_RETRIES,
            step="1",
            description="When the output gate fails the video, run the job again with the next seed.",
            hint=f"default {spec.retry_on_validation_failure} · 0 to {retries.MAX_RETRIES}",
        )
    ]


def model_form(spec: ModelSpec, settings: Settings) -> ModelForm:
    """The form for ``spec``: its files, its parameters and the retry count."""
    return ModelForm(
        spec=spec, files=file_fields(spec, settings), params=param_fields(spec) + retry_field(spec)
    )


def errors_of(exc: DomainError, spec: ModelSpec | None = None) -> dict[str, str]:
    """A refusal as messages by form field: its details' fields, its own field, or the whole form."""
    inputs = set(spec.inputs) if spec is not None else set(FILE_MISSING)
    params = {*spec.params.model_fields, retries.FIELD} if spec is not None else set()
    out: dict[str, str] = {}
    for detail in exc.details:
        name = str(detail.get("field") or "")
        message = str(detail.get("message", exc.message))
        if name in inputs and exc.code == "missing_input":
            out.setdefault(name, FILE_MISSING.get(name, message))
        elif name in params:
            out.setdefault(name, message)
        elif name and name != "(body)":
            out.setdefault(FORM_LEVEL, f"'{name}': {message}")
        else:
            out.setdefault(FORM_LEVEL, message)
    if not out:
        field = exc.field if exc.field in inputs | params else None
        out[field or CODE_FIELDS.get(exc.code, FORM_LEVEL)] = exc.message
    return out


def form_within_limits() -> bool:
    """Parse the posted form now, so that its files stream to spool files and the size limits apply
    here rather than at a later first touch: False when the body is larger than this server accepts."""
    try:
        request.form  # noqa: B018
        request.files  # noqa: B018
    except RequestEntityTooLarge:
        return False
    return True


def parse_web_submission(services: Services) -> tuple[Submission, Checked]:
    """The posted form as a checked Submission, or FormInvalid listing every problem by field.

    The same parser and checks as ``POST /jobs``; only the control fields are skipped and a repeated
    field's last value wins. The request body must already be parsed (``request.form``): a body over
    the size limits is refused by the caller before this runs.
    """
    read = read_form(request, services.settings, source="web", rules=WEB_FORM)
    read.submission.principal = current_principal()  # the caller's uploads only (direct uploads)
    checked = check_submission(services, read.submission)
    errors: dict[str, str] = {}
    for problem in read.problems + checked.problems:
        for name, message in errors_of(problem, checked.spec).items():
            errors.setdefault(name, message)
    if errors:
        raise FormInvalid(errors)
    return read.submission, checked
