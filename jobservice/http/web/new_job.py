"""The new-job page (``/``) and its form post (``POST /ui/jobs``).

Without JavaScript the form posts normally and answers 303 to the job's page, or re-renders with
each problem next to its field (422, values kept). With JavaScript the same endpoint is called by
XMLHttpRequest (for upload progress) and answers JSON: 202 with the job's page URL, or the field
errors.
"""

from __future__ import annotations

from typing import Any

from flask import jsonify, redirect, render_template, request, url_for
from werkzeug.datastructures import MultiDict

from jobservice.catalog import ModelSpec
from jobservice.errors import DomainError, NotFound
from jobservice.fleet.presence import online_workers
from jobservice.http.api.errors import OUTAGES, refusal_of
from jobservice.http.api.native.jobs import services
from jobservice.http.api.policy.auth import current_principal
from jobservice.http.web.blueprint import bp, wants_json
from jobservice.http.web.forms import (
    FORM_LEVEL,
    TASKS,
    FormInvalid,
    errors_of,
    form_within_limits,
    model_form,
    parse_web_submission,
)
from jobservice.http.web.security import check_csrf
from jobservice.jobs.submit import submit_job


def _choose(task: str | None, model_id: str | None) -> tuple[str, ModelSpec | None]:
    catalog = services().catalog
    spec = catalog.get(model_id) if model_id else None
    if spec is not None and task not in TASKS:
        task = spec.task
    if task not in TASKS:
        task = "audio2video"
    if spec is None or spec.task != task:
        spec = catalog.default_for(task)
    return task, spec


def _online_models() -> set[str] | None:
    """Models some live worker serves; None when presence cannot be read."""
    settings = services().settings
    try:
        with services().db.session() as session:
            workers = online_workers(
                session, stale_after_seconds=max(15.0, settings.reap_interval_seconds * 3 + 5)
            )
    except Exception:  # noqa: BLE001 - the form works without presence
        return None
    return {model for worker in workers for model in worker.models}


def render_form(
    task: str | None,
    model_id: str | None,
    *,
    values: MultiDict[str, str] | None = None,
    errors: dict[str, str] | None = None,
    status: int = 200,
) -> tuple[str, int]:
    """The new-job page for ``task``/``model_id`` with ``values`` filled in and ``errors`` shown."""
    task, spec = _choose(task, model_id)
    settings = services().settings
    return (
        render_template(
            "web/new_job.html",
            nav="new",
            tasks=TASKS,
            task=task,
            models=services().catalog.for_task(task),
            spec=spec,
            form=model_form(spec, settings) if spec else None,
            online=_online_models(),
            values=values or MultiDict(),
            errors=errors or {},
            form_error=(errors or {}).get(FORM_LEVEL),
            limits={
                "min_audio_seconds": settings.min_audio_seconds,
                "max_audio_seconds": settings.max_audio_seconds,
                "min_image_side": settings.min_image_side,
                "upload_above": int(settings.upload_direct_above_mb * 2**20),
            },
        ),
        status,
    )


@bp.get("/")
def new_job() -> tuple[str, int]:
    """The home page: the new-job form (``?task=text2video``, ``?model=<id>``)."""
    return render_form(request.args.get("task"), request.args.get("model"))


@bp.get("/ui")
def ui_root() -> Any:
    """``/ui`` leads home."""
    return redirect(url_for("web.new_job"))


@bp.get("/ui/new/params")
def model_params() -> tuple[str, int]:
    """The model description and parameter inputs of one model (swapped in by the form's script)."""
    task, spec = _choose(request.args.get("task"), request.args.get("model"))
    if spec is None:
        raise NotFound("unknown_model", "No model serves this task.")
    html = render_template(
        "web/_model_params.html",
        spec=spec,
        form=model_form(spec, services().settings),
        online=_online_models(),
        values=MultiDict(),
        errors={},
    )
    return html, 200


def _refused(errors: dict[str, str], status: int) -> Any:
    """The form again with ``errors`` (JSON for the page's script)."""
    if wants_json():
        body = {"error": {"code": "form_invalid", "message": "Some fields need attention."}, "fields": errors}
        return jsonify(body), status
    form = request.form
    return render_form(form.get("task"), form.get("model"), values=form, errors=errors, status=status)


def _unreadable(message: str, status: int) -> Any:
    """The body could not be read (too large, a broken part): the form again, empty.

    The form's action carries ``task`` and ``model`` in its query string so the right form comes back.
    """
    if wants_json():
        code = "payload_too_large" if status == 413 else "invalid_upload"
        return jsonify({"error": {"code": code, "message": message}, "fields": {}}), status
    args = request.args
    return render_form(args.get("task"), args.get("model"), errors={FORM_LEVEL: message}, status=status)


@bp.post("/ui/jobs")
def create_job() -> Any:
    """Accept the form: 303 to the new job's page (JSON 202 for the page's script), or the form again."""
    try:
        within = form_within_limits()
    except DomainError as exc:  # one file over the per-file ceiling, or an unreadable part
        return _unreadable(exc.message, exc.status)
    if not within:
        limit = services().settings.max_request_mb
        return _unreadable(f"The upload is larger than the limit of {limit} MB.", 413)
    if request.form.get("change_model"):
        # The no-JavaScript way to switch models: show the chosen model's parameters.
        return render_form(request.form.get("task"), request.form.get("model"), values=request.form)
    check_csrf()
    svc = services()
    try:
        sub, checked = parse_web_submission(svc)
        sub.principal = current_principal()
        job, _ = submit_job(svc, sub, checked=checked)
    except FormInvalid as exc:
        return _refused(exc.errors, exc.status)
    except (DomainError, *OUTAGES) as exc:  # refused after the form's checks (a replay, an outage)
        refusal = refusal_of(exc)
        spec = svc.catalog.get(request.form.get("model") or "")
        return _refused(errors_of(refusal, spec), refusal.status)
    page = url_for("web.job_page", job_id=str(job.id))
    if wants_json():
        response = jsonify({"id": str(job.id), "url": page})
        response.status_code = 202
        response.headers["Location"] = page
        return response
    return redirect(page, code=303)
