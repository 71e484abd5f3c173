"""Reading a job submission from a request: the one parser of ``POST /jobs`` and the web form.

JSON bodies (text2video) are read through ``JobCreate``; multipart and urlencoded bodies
(audio2video, and the web form) have each uploaded file checked by its content
(``jobservice.media.uploads``). Problems are collected, each tied to the field it belongs to, so the API
can answer the first and the web form can show them all next to their inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flask import Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jobservice.errors import DomainError, Invalid, TooLarge, Unsupported
from jobservice.http.api.bodies import json_object, read_body
from jobservice.jobs.idempotency import parse_idempotency_key
from jobservice.jobs.submit import Submission
from jobservice.media.uploads import FILE_CHECKS, spool_of
from jobservice.settings import Settings

FORM_TYPES = {"multipart/form-data", "application/x-www-form-urlencoded"}
# A text2video request is a prompt and a few numbers; files go as multipart.
MAX_JSON_BYTES = 256 * 1024


class JobCreate(BaseModel):
    """The JSON body of ``POST /jobs``: the task and model, with the model's parameters beside them."""

    model_config = ConfigDict(extra="allow")

    task: str | None = Field(None, description="text2video (JSON) or audio2video (multipart).")
    model: str | None = Field(None, description="A model id from /models; the task's default if absent.")
    webhook: str | None = Field(
        None, description="An https URL to POST the job's events to (Standard Webhooks signatures)."
    )
    webhook_events_filter: Any = Field(
        None, description='Which events: a list (or comma string) of "start", "completed"; default both.'
    )
    retry_on_validation_failure: Any = Field(
        None,
        description="When the output gate fails the video, run the job again with the next seed, up to "
        "this many times (0-10; default: the model's, usually 0). Needs a model with a seed.",
    )

    def submission(self) -> Submission:
        """The submission this body asks for (every field, task and model included, as parameters)."""
        return Submission(task=self.task, model=self.model, params=self.model_dump(exclude_none=False))


@dataclass
class FormRules:
    """How a form body's fields are read: the web form ignores its control fields and lets the last of
    repeated values win (a checkbox arrives after its hidden fallback); the API refuses repeats."""

    ignore: frozenset[str] = frozenset()
    last_value_wins: bool = False


@dataclass
class ReadForm:
    """A form body read into a submission, with every problem found on the way."""

    submission: Submission
    problems: list[DomainError] = field(default_factory=list)


def json_submission(request: Request) -> Submission:
    """A submission from a JSON body, refused when the body is not a JSON object of the right shape."""
    too_large = TooLarge(
        "payload_too_large",
        f"A JSON job request is limited to {MAX_JSON_BYTES // 1024} KB; send files as multipart.",
    )
    body = json_object(read_body(request, limit=MAX_JSON_BYTES, too_large=too_large))
    try:
        return JobCreate.model_validate(body).submission()
    except ValidationError as exc:
        name = str(exc.errors()[0]["loc"][0])  # only task, model and webhook are typed
        raise Invalid(f"invalid_{name}", f"'{name}' must be a string.", field=name) from None


def _read_files(request: Request, settings: Settings, read: ReadForm) -> None:
    for name in request.files:
        parts = request.files.getlist(name)
        if len(parts) > 1:
            read.problems.append(
                Invalid("duplicate_input", f"Send one '{name}' file, not {len(parts)}.", field=name)
            )
            continue
        if name not in FILE_CHECKS:
            message = f"No model takes a file named '{name}'; send 'image' and 'audio'."
            read.problems.append(Invalid("unexpected_input", message))
            continue
        storage = parts[0]
        if not storage.filename and spool_of(storage).size == 0:
            continue  # an empty file input of an HTML form
        try:
            read.submission.uploads[name] = FILE_CHECKS[name](name, spool_of(storage), settings)
        except DomainError as exc:
            exc.field = exc.field or name
            read.problems.append(exc)


def _read_fields(request: Request, rules: FormRules, read: ReadForm) -> None:
    for key in request.form:
        if key in rules.ignore:
            continue
        values = request.form.getlist(key)
        if len(values) > 1 and not rules.last_value_wins:
            message = f"Parameter '{key}' was given {len(values)} times."
            read.problems.append(Invalid("invalid_parameters", message, field=key))
            continue
        if any("\x00" in value for value in values):
            read.problems.append(Invalid("invalid_text", f"'{key}' contains a NUL character.", field=key))
            continue
        read.submission.params[key] = values[-1]


def read_form(
    request: Request, settings: Settings, *, source: str, rules: FormRules | None = None
) -> ReadForm:
    """A multipart or urlencoded body: files checked by content, fields as parameters, problems kept."""
    read = ReadForm(
        Submission(
            task=request.form.get("task") or None,
            model=request.form.get("model") or None,
            params={},
            uploads={},
            source=source,
        )
    )
    _read_files(request, settings, read)
    _read_fields(request, rules or FormRules(), read)
    return read


def parse_submission(request: Request, settings: Settings, *, source: str = "api") -> Submission:
    """The submission of ``POST /jobs`` (JSON or form), with its Idempotency-Key; the first problem raised."""
    if request.mimetype == "application/json":
        sub = json_submission(request)
    elif request.mimetype in FORM_TYPES:
        read = read_form(request, settings, source=source)
        if read.problems:
            raise read.problems[0]
        sub = read.submission
    else:
        raise Unsupported(
            "unsupported_media_type",
            "Send text2video as application/json and audio2video as multipart/form-data.",
        )
    # Stored as "api:<key>": batch slots use "batch:..." keys in the same column.
    sub.idempotency_key = parse_idempotency_key(request.headers.get("Idempotency-Key"))
    sub.source = source
    return sub
