"""Retry on a failed gate: a job that asks for ``retry_on_validation_failure: N`` runs again with
the next seed when the output gate fails its video, up to N more times.

The request is resolved when the job is accepted (the job's own N, else its model's deployment
default, 0 for a regression batch: a nightly run must see its failures) and kept on the row, so a
deployment changed later does not change what an accepted job was promised. Each try's seed is the
requested seed plus the number of tries before it (wrapping at 2**32); ``params`` keep the request
as it was made, and every try's seed, verdict and files are listed in ``validation_attempts``.

Only the gate's verdict is retried: a model error, a timeout or a cancel ends the job as before,
and a worker lost mid-run is requeued by the reaper within its own budget (``max_attempts``), which
a gate retry does not use up.
"""

from __future__ import annotations

from typing import Any

from jobservice.catalog import MAX_GATE_RETRIES as MAX_RETRIES
from jobservice.catalog import ModelSpec
from jobservice.db.tables import Job
from jobservice.errors import Invalid

FIELD = "retry_on_validation_failure"
SEEDS = 2**32


def requested_retries(spec: ModelSpec, raw: Any, *, batch: bool) -> int | None:
    """The N a submission asks for (None: the model's default), refused with a clear error when it
    is not a whole number from 0 to ``MAX_RETRIES``, when the model has no seed to vary, or for a
    regression batch's job."""
    if raw is None or raw == "":
        return None
    whole = isinstance(raw, int) or (isinstance(raw, str) and raw.strip().isdecimal() and raw.isascii())
    if isinstance(raw, bool) or not whole:
        raise Invalid(
            "invalid_retry",
            f"'{FIELD}' must be a whole number from 0 to {MAX_RETRIES}.",
            field=FIELD,
        )
    count = int(raw)
    if not 0 <= count <= MAX_RETRIES:
        raise Invalid(
            "invalid_retry", f"'{FIELD}' must be from 0 to {MAX_RETRIES}; it was {count}.", field=FIELD
        )
    if count and batch:
        raise Invalid(
            "retry_not_for_batches",
            "A regression batch's jobs never retry a failed gate: the batch must see its failures.",
            field=FIELD,
        )
    if count and "seed" not in spec.params.model_fields:
        raise Invalid(
            "retry_needs_seed",
            f"Model '{spec.id}' takes no seed, so a retry would make the same video; "
            f"'{FIELD}' needs a model with a seed.",
            field=FIELD,
        )
    return count


def resolved_retries(spec: ModelSpec, requested: int | None, *, batch: bool) -> int:
    """What the job is promised: its own N, else the model's deployment default; 0 for batches and
    for models without a seed."""
    if batch or "seed" not in spec.params.model_fields:
        return 0
    return spec.retry_on_validation_failure if requested is None else requested


def tries_of(job: Job) -> list[dict[str, Any]]:
    """The job's earlier tries that the gate failed (oldest first)."""
    return list(job.validation_attempts or [])


def seed_of_try(params: dict[str, Any], earlier: int) -> int | None:
    """The seed of the try that follows ``earlier`` failed ones (None: the model takes no seed)."""
    seed = params.get("seed")
    if seed is None:
        return None
    return (int(seed) + earlier) % SEEDS


def run_params(job: Job) -> dict[str, Any]:
    """The parameters this try runs with: the request's, with the try's seed."""
    params = dict(job.params or {})
    seed = seed_of_try(params, len(tries_of(job)))
    if seed is not None:
        params["seed"] = seed
    return params


def retries_left(job: Job) -> int:
    """How many more tries a failed gate may start (0 for a regression batch's job)."""
    if job.batch_id is not None:
        return 0
    return max(0, int(job.retry_on_validation_failure or 0) - len(tries_of(job)))


def try_record(
    job: Job,
    *,
    verdict: str,
    failed_checks: list[str],
    message: str,
    output_key: str | None,
    report_key: str | None,
    card_seconds: float | None,
    finished_at: str,
) -> dict[str, Any]:
    """What ``validation_attempts`` keeps of one try the gate failed."""
    return {
        "try": len(tries_of(job)) + 1,
        "attempt": job.attempts,
        "seed": seed_of_try(dict(job.params or {}), len(tries_of(job))),
        "verdict": verdict,
        "failed_checks": failed_checks,
        "message": message,
        "output_key": output_key,
        "report_key": report_key,
        "card_seconds": card_seconds,
        "finished_at": finished_at,
    }
