"""Accepting a job: check it, store its inputs, record it, queue it.

Shared by the JSON API, the web form, batches and job groups (``jobservice.groups.service`` checks
every row with ``check_submission``, then records all of them at once with ``new_job_row``). Order
matters for "nothing lost, nothing left behind": inputs go to the object store first, then the row
is committed; the committed row is the queue (``jobservice.fleet.dispatch`` hands it to a card group
when one should take it, and only then is a message sent). A job a free group stands ready for takes
that group's standing offer in the transaction that records it and is sent at once
(``jobservice.fleet.offers``); otherwise the request only wakes a worker's dispatcher when a group
looks free. A refusal before the commit deletes whatever was stored; an accepted job is in the
table, so it is never lost.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import tempfile
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError, OperationalError

from jobservice.auth.principal import Principal, anonymous
from jobservice.broker import sender
from jobservice.catalog import ModelSpec
from jobservice.db.tables import Job, utcnow
from jobservice.errors import Conflict, DomainError, Invalid, NotFound, invalid_parameters
from jobservice.fleet import shares
from jobservice.fleet.costs import output_seconds
from jobservice.fleet.dispatch import Dispatched, request_round, send_all, take_offer
from jobservice.jobs import retries
from jobservice.jobs.idempotency import scoped_key
from jobservice.jobs.transitions import record_created
from jobservice.media.uploads import FILE_CHECKS, CheckedUpload, stored_upload
from jobservice.quotas.admit import admit_jobs
from jobservice.quotas.disk import check_free_space
from jobservice.quotas.limits import recent_limits
from jobservice.storage import ObjectNotFound, StoreUnavailable
from jobservice.uploads.service import checked_upload, mark_used
from jobservice.webhooks.targets import check_webhook
from jobservice.wiring import Services

log = logging.getLogger(__name__)

RESERVED_FIELDS = {"task", "model"}


@dataclass
class Submission:
    """A parsed request to run one job."""

    task: str | None
    model: str | None
    params: dict[str, Any]
    uploads: dict[str, CheckedUpload] = field(default_factory=dict)
    source: str = "api"
    priority: int = 0
    idempotency_key: str | None = None
    # Set for the jobs of a nightly batch (jobservice.nightly).
    batch_id: uuid.UUID | None = None
    batch_case: str | None = None
    batch_repeat: int | None = None
    # Set for the jobs of a job group (jobservice.groups): which group, and its manifest row.
    group_id: uuid.UUID | None = None
    group_row: int | None = None
    # Who asks (jobservice.auth): the job belongs to its tenant; events record its key id.
    principal: Principal = field(default_factory=lambda: anonymous("default"))
    # Objects already in the store to use as the inputs (a batch's), instead of storing ``uploads``.
    stored_inputs: dict[str, str] | None = None
    # Already admitted against the tenant's quotas as part of a whole (a batch).
    admitted: bool = False
    # Where to POST the job's events (jobservice.webhooks) and which: "start", "completed" (None:
    # both). ``check_submission`` also takes them from ``params`` ("webhook", "webhook_events_filter").
    webhook: str | None = None
    webhook_events: str | list[str] | None = None
    # Tries with the next seed when the gate fails (jobservice.jobs.retries; None: the model's
    # default). ``check_submission`` also takes it from ``params``.
    retry_on_validation_failure: int | None = None


def resolve_model(services: Services, task: str | None, model: str | None) -> ModelSpec:
    """The catalog entry a request asks for, with a clear refusal when it does not fit."""
    catalog = services.catalog
    for name, value in (("task", task), ("model", model)):
        if value is not None and not isinstance(value, str):
            raise Invalid(f"invalid_{name}", f"'{name}' must be a string.")
    if task is not None and task not in {"audio2video", "text2video"}:
        raise Invalid("invalid_task", f"Unknown task '{task}'; use audio2video or text2video.")
    if model:
        spec = catalog.get(model)
        if spec is None:
            known = ", ".join(catalog.ids())
            raise NotFound("unknown_model", f"There is no model '{model}'. Known models: {known}.")
        if task and spec.task != task:
            raise Invalid("model_task_mismatch", f"Model '{model}' performs {spec.task}, not {task}.")
        return spec
    if not task:
        raise Invalid("missing_task", "Say which task to run: 'task' must be audio2video or text2video.")
    spec = catalog.default_for(task)
    if spec is None:
        raise NotFound("unknown_model", f"No model is configured for {task}.")
    return spec


def validate_params(spec: ModelSpec, raw: dict[str, Any]) -> dict[str, Any]:
    """Check parameters against the model's schema and fill in defaults (and a seed if absent)."""
    cleaned = {k: v for k, v in raw.items() if k not in RESERVED_FIELDS and v is not None and v != ""}
    try:
        params = spec.params.model_validate(cleaned)
    except ValidationError as exc:
        raise invalid_parameters(exc) from None
    resolved = params.model_dump(mode="json")
    if "seed" in resolved and resolved["seed"] is None:
        resolved["seed"] = secrets.randbelow(2**32)
    return resolved


def request_fingerprint(sub: Submission, spec: ModelSpec) -> str:
    """What makes two submissions the same request (an Idempotency-Key replay must match it)."""
    raw, uploads = sub.params, sub.uploads
    body: dict[str, Any] = {
        "model": spec.id,
        "params": {k: raw[k] for k in sorted(raw) if k not in RESERVED_FIELDS},
        "inputs": {
            name: up.meta.get("sha256") or up.meta.get("upload_id") for name, up in sorted(uploads.items())
        },
    }
    if sub.retry_on_validation_failure is not None:  # absent: the fingerprint of earlier releases
        body[retries.FIELD] = sub.retry_on_validation_failure
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def input_problems(spec: ModelSpec, uploads: dict[str, CheckedUpload]) -> list[DomainError]:
    """What is wrong with the files of a submission for ``spec``: missing ones, then unexpected ones."""
    problems: list[DomainError] = []
    missing = [name for name in spec.inputs if name not in uploads]
    if missing:
        names = " and ".join(f"'{m}'" for m in missing)
        problems.append(
            Invalid(
                "missing_input",
                f"Model '{spec.id}' needs the file {names} (multipart/form-data).",
                field=missing[0],
                details=[
                    {"field": m, "message": "This file is required.", "type": "missing"} for m in missing
                ],
            )
        )
    problems.extend(
        Invalid("unexpected_input", f"Model '{spec.id}' takes no file '{name}'.", field=name)
        for name in uploads
        if name not in spec.inputs
    )
    return problems


@dataclass(frozen=True)
class Checked:
    """A submission checked against its model: the model and parameters, or every problem found."""

    spec: ModelSpec | None
    params: dict[str, Any]
    problems: list[DomainError]


def check_submission(services: Services, sub: Submission) -> Checked:
    """Resolve the model, validate the parameters once and check the files, collecting the problems.

    Problems come in the order the API reports them (it answers the first); the web form shows all.
    """
    try:
        spec = resolve_model(services, sub.task, sub.model)
    except DomainError as exc:
        return Checked(spec=None, params={}, problems=[exc])
    problems: list[DomainError] = (
        _take_webhook(services, sub) + _take_retry(spec, sub) + _take_uploads(services, sub)
    )
    params: dict[str, Any] = {}
    try:
        params = validate_params(spec, sub.params)
    except Invalid as exc:
        problems.append(exc)
    problems.extend(input_problems(spec, sub.uploads))
    return Checked(spec=spec, params=params, problems=problems)


def _take_webhook(services: Services, sub: Submission) -> list[DomainError]:
    """Move the webhook fields out of the parameters and check them (jobservice.webhooks.targets)."""
    sub.webhook = sub.params.pop("webhook", sub.webhook)
    sub.webhook_events = sub.params.pop("webhook_events_filter", sub.webhook_events)
    try:
        sub.webhook, sub.webhook_events = check_webhook(
            sub.webhook, sub.webhook_events, services.settings.webhook_allowed_hosts
        )
    except DomainError as exc:
        return [exc]
    return []


def _take_uploads(services: Services, sub: Submission) -> list[DomainError]:
    """Move file inputs named by an upload id (``"image": "<upload id>"`` in a JSON body or a form's
    text field) out of the parameters, as the uploads they name (``jobservice.uploads``)."""
    problems: list[DomainError] = []
    for name in FILE_CHECKS:
        if name not in sub.params:
            continue
        raw = sub.params.pop(name)
        if raw is None or raw == "":
            continue
        if name in sub.uploads:
            problems.append(
                Invalid("duplicate_input", f"Send the {name} once: a file or an upload id.", field=name)
            )
            continue
        try:
            sub.uploads[name] = checked_upload(services, sub.principal, raw, name)
        except DomainError as exc:
            problems.append(exc)
    return problems


def _take_retry(spec: ModelSpec, sub: Submission) -> list[DomainError]:
    """Move the retry count out of the parameters and check it (jobservice.jobs.retries)."""
    raw = sub.params.pop(retries.FIELD, sub.retry_on_validation_failure)
    try:
        sub.retry_on_validation_failure = retries.requested_retries(spec, raw, batch=sub.batch_id is not None)
    except DomainError as exc:
        return [exc]
    return []


def _existing(services: Services, key: str, fingerprint: str, tenant: str) -> Job | None:
    with services.db.session() as session:
        job = session.scalar(select(Job).where(Job.idempotency_key == key, Job.tenant == tenant))
    if job is None:
        return None
    if job.request_fingerprint != fingerprint:
        raise Conflict(
            "idempotency_conflict", "This Idempotency-Key was already used for a different request."
        )
    if job.deleted_at is not None:  # no replay of a job that is gone, and no second job either
        raise Conflict(
            "idempotency_key_deleted",
            f"This Idempotency-Key made job {job.id}, deleted on {job.deleted_at:%Y-%m-%d %H:%M} UTC; "
            "send a new key to submit it again.",
        )
    return job


def submit_job(services: Services, sub: Submission, *, checked: Checked | None = None) -> tuple[Job, bool]:
    """Accept ``sub`` and return (job, created); created is False for an idempotent replay.
    ``checked`` is ``check_submission``'s answer when the caller already has it (the web form)."""
    checked = checked or check_submission(services, sub)
    if checked.problems:
        raise checked.problems[0]
    spec, params = checked.spec, checked.params
    assert spec is not None  # a submission without problems has a model
    fingerprint = request_fingerprint(sub, spec)
    key = scoped_key(sub.idempotency_key, sub.principal.tenant)
    if key:
        existing = _existing(services, key, fingerprint, sub.principal.tenant)
        if existing is not None:
            return existing, False

    job_id = uuid.uuid4()
    prefix = f"jobs/{job_id}/"
    if sub.stored_inputs is not None:
        input_keys = dict(sub.stored_inputs)
    else:
        check_free_space(services)  # 507 before anything is stored
        input_keys = store_inputs(services, prefix, sub.uploads)
    job = new_job_row(
        services, sub, spec, params, job_id=job_id, input_keys=input_keys, fingerprint=fingerprint
    )
    job.idempotency_key = key
    try:
        handed = _record_admitted(services, sub, job)
    except IntegrityError:
        _cleanup(services, prefix)
        if key:
            replay = _existing(services, key, fingerprint, sub.principal.tenant)
            if replay is not None:
                return replay, False
        raise
    except OperationalError as exc:
        _cleanup(services, prefix)
        log.error("job %s: the database refused the new row: %s", job_id, exc.orig)
        raise  # answered as 503 database_unavailable by jobservice.http.api.errors
    except DomainError:  # over a quota: nothing is kept
        _cleanup(services, prefix)
        raise

    used = [up.meta["upload_id"] for up in sub.uploads.values() if up.stored_key is not None]
    if used:
        mark_used(services, used)
    _enqueue(services, job, handed)
    return job, True


def new_job_row(
    services: Services,
    sub: Submission,
    spec: ModelSpec,
    params: dict[str, Any],
    *,
    job_id: uuid.UUID,
    input_keys: dict[str, str],
    fingerprint: str,
    now: datetime | None = None,
) -> Job:
    """The row of a checked submission (``params``: ``check_submission``'s), not yet recorded;
    ``now``: its creation time (a job group's rows are one moment apart, in row order)."""
    now = now or utcnow()
    return Job(
        id=job_id,
        task=spec.task,
        model=spec.id,
        params=params,
        source=sub.source,
        priority=sub.priority,
        input_keys=input_keys,
        input_meta={name: up.meta for name, up in sub.uploads.items()},
        max_attempts=services.settings.max_attempts,
        idempotency_key=sub.idempotency_key,
        request_fingerprint=fingerprint,
        created_at=now,
        updated_at=now,
        attempts=0,
        progress=0.0,
        timings={},
        validation_summary={},
        batch_id=sub.batch_id,
        batch_case=sub.batch_case,
        batch_repeat=sub.batch_repeat,
        group_id=sub.group_id,
        group_row=sub.group_row,
        tenant=sub.principal.tenant,
        submitted_by=sub.principal.key_id,
        webhook_url=sub.webhook,
        webhook_events=sub.webhook_events if isinstance(sub.webhook_events, str) else None,
        retry_on_validation_failure=retries.resolved_retries(
            spec, sub.retry_on_validation_failure, batch=sub.batch_id is not None
        ),
        output_seconds=output_seconds(spec, params, {name: up.meta for name, up in sub.uploads.items()}),
    )


def _record_admitted(services: Services, sub: Submission, job: Job) -> Dispatched | None:
    """Insert the job if the tenant's quotas allow it (a batch's jobs were admitted with their
    batch), keeping its files as long as the key's, tenant's or default retention says; in the same
    transaction, take a free group's standing offer for it if one stands (returned: its message is
    sent after the commit; ``jobservice.fleet.offers``).

    The offer is taken first (a refusal below rolls it back with the row; its locks come before the
    tenant's, as in every submission, so two submissions never wait on each other in a cycle).
    The tenant's overrides come from the process's copy of the last few seconds (``recent_limits``:
    a read of its own was a seventh of a submission's CPU, and a read before the write in one
    transaction would break SQLite's write lock); then the row and its event are inserted, and only
    then is the tenant's admission lock taken for the counts: it is held until commit, so everything
    before it runs in parallel with the tenant's other submissions.
    """
    settings = services.settings
    limits = recent_limits(services, sub.principal)
    job.expires_at = job.created_at + timedelta(hours=limits.retention_hours)
    with services.db.session() as session:
        offer = take_offer(session, job)  # first: the row is inserted dispatched (one write)
        record_created(session, job, actor=sub.principal.actor)
        if not sub.admitted:
            session.flush()  # the row and its event, before the lock
            admit_jobs(session, settings, sub.principal, 1, inserted=1, limits=limits)
        else:
            session.flush()
        # Fair share: a tenant with no other job waiting starts competing (its level is lifted). A
        # job its group took at once is not waiting: the tenant competes if others of its jobs wait.
        shares.start_competing(
            session,
            tenant=sub.principal.tenant,
            inserted=0 if offer is not None else 1,
            catalog=services.catalog,
            settings=settings,
        )
        return Dispatched.of(job, offer) if offer is not None else None


def _enqueue(services: Services, job: Job, handed: Dispatched | None) -> None:
    """A job that took a standing offer is sent to its group now. Any other waits in the table;
    when a group that may run it looks free, a worker's dispatcher is woken to run a round now
    (``request_round``: never a round in the request). A failure here leaves it to the workers'
    maintenance rounds, which dispatch (and send again) every few seconds."""
    if handed is not None:
        send_all(services.db, [handed], sender(services.celery))
        return
    request_round(services, [job.model])


def store_input(services: Services, key: str, upload: CheckedUpload) -> None:
    """Put one checked input file at ``key``: a direct upload is copied inside the store (its bytes
    never pass through this process), a spooled file is put."""
    if upload.stored_key is not None:
        services.store.copy(upload.stored_key, key)
    else:
        services.store.put_file(key, upload.path, content_type=upload.content_type)


def store_inputs(services: Services, prefix: str, inputs: dict[str, CheckedUpload]) -> dict[str, str]:
    """Put checked input files under ``<prefix>inputs/``, each once (``inputs``: the name of its
    object -> the file; a job names them by input, a set by content) -> their keys. On a failure
    everything under ``prefix`` is deleted: a direct upload gone from the store is 409
    ``upload_missing``, an outage is re-raised (503 ``storage_unavailable``)."""
    keys: dict[str, str] = {}
    try:
        for name, upload in inputs.items():
            key = f"{prefix}inputs/{name}.{upload.extension}"
            store_input(services, key, upload)
            keys[name] = key
    except ObjectNotFound:
        _cleanup(services, prefix)
        raise Conflict("upload_missing", "An upload this names is no longer in the object store.") from None
    except BaseException as exc:
        _cleanup(services, prefix)
        if isinstance(exc, StoreUnavailable):
            log.error("%s: storing inputs failed: %s", prefix, exc)
        raise  # an outage is answered as 503 storage_unavailable by jobservice.http.api.errors
    return keys


def _cleanup(services: Services, prefix: str) -> None:
    try:
        services.store.delete_prefix(prefix)
    except StoreUnavailable:
        log.exception("could not delete %s after a refused submission", prefix)


def resubmit_job(
    services: Services,
    job: Job,
    *,
    source: str = "web",
    principal: Principal | None = None,
    overrides: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> Job:
    """Submit ``job`` again as a new job: same model, parameters (seed included), inputs and
    webhook; ``overrides`` replaces some parameters (a remix's new prompt).

    The stored inputs are copied to the new job's prefix through a temporary folder, so this works
    on any object store and the new job goes through ``submit_job`` like any other.
    """
    spool = services.settings.resolved_spool_dir()
    spool.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=spool, prefix=f"resubmit-{os.getpid()}-") as tmp:
        uploads: dict[str, CheckedUpload] = {}
        for name, key in (job.input_keys or {}).items():
            try:
                path = services.store.get_file(key, Path(tmp) / Path(key).name)
            except ObjectNotFound:
                raise Conflict(
                    "inputs_missing", f"Job {job.id}'s input '{name}' is no longer in the object store."
                ) from None
            except StoreUnavailable as exc:
                log.error("job %s: reading input %s failed: %s", job.id, key, exc)
                raise
            uploads[name] = stored_upload(name, path, (job.input_meta or {}).get(name) or {})
        sub = Submission(
            task=job.task,
            model=job.model,
            params={**(job.params or {}), **(overrides or {})},
            uploads=uploads,
            source=source,
            priority=job.priority,
            principal=principal or anonymous(job.tenant),
            idempotency_key=idempotency_key,
            webhook=job.webhook_url,
            webhook_events=job.webhook_events,
            retry_on_validation_failure=job.retry_on_validation_failure or None,
        )
        new_job, _ = submit_job(services, sub)
    return new_job
