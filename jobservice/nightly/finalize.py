"""Finishing a batch: once every job ended, read the reports, check expectations, compare, record.

``refresh_batch`` is cheap while jobs still run (one query) and does the work exactly once: the
final write is a compare-and-swap from ``running`` to ``finished``, so the beat's periodic tick,
an API request and a waiting CLI may all call it. The report files are also written to the object
store (``batches/<id>/report.{json,csv,md}``) for people who read the store rather than the API.
"""

from __future__ import annotations

import json
import logging
import statistics
import uuid
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from jobservice.db.tables import TERMINAL_STATUSES, Batch, Job, JobStatus
from jobservice.nightly.compare import compare_results, history_medians
from jobservice.nightly.environment import environment_changes, runs_environment
from jobservice.nightly.figures import METRICS, RunFacts, figures_of, run_facts, samples_of, unavailable
from jobservice.nightly.render import render_csv, render_json, render_markdown
from jobservice.nightly.service import (
    abandon_if_incomplete,
    get_batch,
    has_finished_cases,
    latest_jobs,
    slots,
)
from jobservice.nightly.states import BatchStatus, mark_finished
from jobservice.nightly.stats import summarize
from jobservice.storage import ObjectNotFound, StoreUnavailable
from jobservice.wiring import Services

log = logging.getLogger(__name__)

# Runs that may become the next baseline by themselves: not a regressed one, and not one that
# could not tell (a slow drift of inconclusive runs must not carry the baseline along with it).
GOOD_VERDICTS = ("passed", "no_baseline")
ERROR_VERDICT = "error"  # the results could not be judged (a bug): recorded, never a baseline


def refresh_batch(services: Services, batch_id: uuid.UUID) -> Batch:
    """The batch, finished first if its last job has ended."""
    with services.db.session() as session:
        batch = get_batch(session, batch_id)
        if batch.status != BatchStatus.RUNNING or _has_active_job(session, batch_id):
            return batch
        jobs = latest_jobs(session, batch_id)
        expected = {(case["name"], repeat) for case, repeat in slots(batch.spec or {})}
        if not expected <= set(jobs) or any(j.status not in TERMINAL_STATUSES for j in jobs.values()):
            return batch
    if abandon_if_incomplete(services, batch):
        with services.db.session() as session:
            return get_batch(session, batch_id)
    return finalize_batch(services, batch, jobs)


def _has_active_job(session: Session, batch_id: uuid.UUID) -> bool:
    # One row read instead of every job: GET /batches/<id> and its job pages refresh a running
    # nightly batch of 10,000 queued jobs on every request (scripts/bench_scale.py).
    active = select(Job.id).where(
        Job.batch_id == batch_id, Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING])
    )
    return session.scalar(active.limit(1)) is not None


def finalize_batch(services: Services, batch: Batch, jobs: dict[tuple[str, int], Job]) -> Batch:
    """Compute results, baseline, comparison, environment and verdict; record them once."""
    _settle_earlier(services, batch)  # an earlier run that ended unseen may be this one's baseline
    runs_by_case: dict[str, list[RunFacts]] = {}
    for (case, repeat), job in sorted(jobs.items()):
        runs_by_case.setdefault(case, []).append(_facts(services, job, repeat))
    with services.db.session() as session:
        runs_env = runs_environment(session, [r for runs in runs_by_case.values() for r in runs])
        baseline = choose_baseline(session, batch)
        outcome = judge(batch, runs_by_case, runs_env, baseline, history=earlier_results(session, batch))
        done = mark_finished(session, batch.id, baseline_id=baseline.id if baseline else None, **outcome)
    with services.db.session() as session:
        batch = get_batch(session, batch.id)
    if done:
        log.info("batch %s (%s) finished: %s", batch.id, batch.name, batch.verdict)
        _store_reports(services, batch)
    return batch


def judge(
    batch: Batch,
    runs_by_case: dict[str, list[RunFacts]],
    runs_env: dict[str, Any],
    baseline: Batch | None,
    *,
    history: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The verdict, results and environment of a batch whose jobs all ended (no I/O). ``history``:
    the ``results`` of the spec's earlier good runs, newest first (each case keeps its medians
    there as ``history``: the drift the comparison allows for).

    Never raises: a bug in reading the runs or comparing them (data nobody foresaw) records the
    verdict ``error`` with the reason, instead of leaving the batch running for the tick to retry
    forever and every page that shows it answering 500.
    """
    environment = {**(batch.environment or {}), "runs": runs_env}
    cases: list[dict[str, Any]] = []
    try:
        cases = [case_results(c, runs_by_case.get(c["name"], [])) for c in batch.spec.get("cases") or []]
        for case in cases:
            case["history"] = history_medians(case, history or [], spec=batch.spec)
        results: dict[str, Any] = {"cases": cases, "comparison": None}
        if baseline is not None:
            results["comparison"] = compare_results(baseline.results, results, spec=batch.spec)
            results["comparison"]["baseline_id"] = str(baseline.id)
            environment["changes"] = environment_changes(baseline.environment or {}, environment)
    except Exception as exc:  # noqa: BLE001 - recorded as the batch's error, see above
        log.exception("batch %s: its results could not be judged", batch.id)
        error = f"The results could not be judged ({type(exc).__name__}: {exc}); this is a bug."
        return {
            "verdict": ERROR_VERDICT,
            "results": {"cases": cases, "comparison": None},
            "environment": environment,
            "error": error[:2000],
        }
    if any(c["status"] == "failed" for c in cases):
        verdict = "failed"
    elif baseline is None:
        verdict = "no_baseline"
    else:
        compared = results["comparison"]["verdict"]
        verdict = compared if compared in ("regressed", "inconclusive") else "passed"
    return {"verdict": verdict, "results": results, "environment": environment}


def _settle_earlier(services: Services, batch: Batch) -> None:
    with services.db.session() as session:
        earlier = list(
            session.scalars(
                select(Batch.id)
                .where(
                    Batch.name == batch.name,
                    Batch.tenant == batch.tenant,
                    Batch.status == BatchStatus.RUNNING,
                    Batch.created_at < batch.created_at,
                )
                .order_by(Batch.created_at)
            )
        )
    for batch_id in earlier:
        refresh_batch(services, batch_id)


def _facts(services: Services, job: Job, repeat: int) -> RunFacts:
    report = None
    if job.report_key:
        try:
            report = json.loads(services.store.get_bytes(job.report_key))
        except (ObjectNotFound, StoreUnavailable, ValueError) as exc:
            log.warning("batch job %s: report unreadable (%s)", job.id, exc)
    return run_facts(
        report,
        job_id=str(job.id),
        repeat=repeat,
        status=str(job.status),
        error_code=job.error_code,
        verdict=job.verdict,
        cold=job.cold_start,
    )


def case_results(case: dict[str, Any], runs: list[RunFacts]) -> dict[str, Any]:
    """One case's runs, samples per metric, frame fingerprints and expectation checks."""
    samples = {name: samples_of(runs, metric) for name, metric in METRICS.items()}
    samples = {name: values for name, values in samples.items() if values}
    good = [r for r in runs if r.status == "succeeded"]
    digests = {r.frames_digest for r in good if r.frames_digest}
    files = {r.output_sha256 for r in good if r.output_sha256}
    first = next((r for r in good if r.frame_hashes), None)
    expectations = check_expectations(case, runs, samples)
    sample_run = good[0] if good else (runs[0] if runs else None)
    return {
        "name": case["name"],
        "model": case["model"],
        "task": case.get("task"),
        "digest": case.get("digest"),
        "deterministic": bool(case.get("deterministic")),
        "params": case.get("params") or {},
        "repeat": case.get("repeat"),
        "runs": [r.as_dict() for r in runs],
        "samples": samples,
        # warm (resident back end), cold (the model loads in every run) or mixed: see metrics.py
        "figures": figures_of(runs),
        "unavailable": unavailable(runs, samples),
        "summary": {name: summarize(values).as_dict() for name, values in samples.items()},
        "frames": {
            "digest": next(iter(digests)) if len(digests) == 1 else None,
            "consistent": len(digests) <= 1,
            "hashes": first.frame_hashes if first else [],
            # Adapters that write their own MP4 emit no frames: their files are compared instead.
            "file_digest": next(iter(files)) if len(files) == 1 else None,
        },
        "expectations": expectations,
        "status": "passed" if all(e["passed"] for e in expectations) else "failed",
        "info": dict(sample_run.info) if sample_run else {},
    }


def check_expectations(
    case: dict[str, Any], runs: list[RunFacts], samples: dict[str, list[float]]
) -> list[dict[str, Any]]:
    """The case's absolute expectations (gate, duration, metric bounds), each with what was found."""
    expect = case.get("expect") or {}
    checks: list[dict[str, Any]] = []

    def check(name: str, passed: bool, expected: Any, actual: Any, message: str) -> None:
        checks.append(
            {"name": name, "passed": passed, "expected": expected, "actual": actual, "message": message}
        )

    gate_failures = [r for r in runs if r.error_code == "validation_failed"]
    other = [
        f"{r.error_code or r.status} (repeat {r.repeat})"
        for r in runs
        if r.status != "succeeded" and r.error_code != "validation_failed"
    ]
    if expect.get("validation", "passed") == "passed":
        check(
            "validation",
            not gate_failures,
            "every run passes the gate",
            f"{len(runs) - len(gate_failures)} of {len(runs)} passed",
            f"{len(gate_failures)} run(s) failed the output gate",
        )
    check(
        "jobs",
        not other,
        "every run finishes",
        ", ".join(other) or "all finished",
        f"runs failed: {', '.join(other)}",
    )
    if expect.get("duration_s") is not None:
        durations = [r.media_duration_s for r in runs if r.status == "succeeded" and r.media_duration_s]
        actual = round(statistics.median(durations), 3) if durations else None
        tolerance = float(expect.get("duration_tolerance_s", 0.15))
        ok = actual is not None and abs(actual - float(expect["duration_s"])) <= tolerance
        check(
            "duration_s",
            ok,
            f"{expect['duration_s']} ± {tolerance} s",
            actual,
            f"media duration {actual} s, expected {expect['duration_s']} ± {tolerance} s",
        )
    for name, bound in (expect.get("metrics") or {}).items():
        values = samples.get(name) or []
        median = round(statistics.median(values), 3) if values else None
        low, high = bound.get("min"), bound.get("max")
        ok = median is not None and (low is None or median >= low) and (high is None or median <= high)
        wanted = " and ".join(
            part
            for part in (f">= {low}" if low is not None else "", f"<= {high}" if high is not None else "")
            if part
        )
        check(
            f"metric:{name}", ok, wanted, median, f"{METRICS[name].label} median {median}, expected {wanted}"
        )
    return checks


def choose_baseline(session: Session, batch: Batch) -> Batch | None:
    """The batch to compare with: a named id, the pinned run, or the last good run of the same spec.

    Only a finished batch with at least one successful run counts: one that ran nothing (all its
    runs failed, or, from an older version, a creation that stored no spec) has nothing to compare.
    """
    mode = str((batch.spec or {}).get("baseline") or "auto")
    same = select(Batch.id).where(
        Batch.name == batch.name,
        Batch.tenant == batch.tenant,
        Batch.id != batch.id,
        Batch.status == BatchStatus.FINISHED,
    )
    if mode not in ("auto", "pinned", "last_good"):
        try:
            wanted = uuid.UUID(mode)
        except ValueError:
            return None
        return _usable(session, [wanted])
    if mode in ("auto", "pinned"):
        pinned = _usable(
            session, session.scalars(same.where(Batch.pinned.is_(True)).order_by(Batch.created_at.desc()))
        )
        if pinned is not None or mode == "pinned":
            return pinned
    return _usable(
        session,
        session.scalars(
            same.where(Batch.verdict.in_(GOOD_VERDICTS), Batch.created_at < batch.created_at).order_by(
                Batch.created_at.desc()
            )
        ),
    )


DRIFT_HISTORY = 10  # earlier good runs whose medians tell how much a spec's figures drift


def earlier_results(session: Session, batch: Batch) -> list[dict[str, Any]]:
    """The ``results`` of the last ``DRIFT_HISTORY`` good runs of the same spec before ``batch``
    (newest first): the ones that may be baselines, so neither a regression nor a run that could
    not tell widens the drift that later runs are judged with."""
    rows = session.scalars(
        select(Batch.results)
        .where(
            Batch.name == batch.name,
            Batch.tenant == batch.tenant,
            Batch.id != batch.id,
            Batch.status == BatchStatus.FINISHED,
            Batch.verdict.in_(GOOD_VERDICTS),
            Batch.created_at < batch.created_at,
        )
        .order_by(Batch.created_at.desc())
        .limit(DRIFT_HISTORY)
    )
    return [r for r in rows if isinstance(r, dict)]


def _usable(session: Session, ids: Iterable[uuid.UUID]) -> Batch | None:
    """The first of ``ids`` (newest first) that can be a baseline; rows are read one at a time."""
    for batch_id in list(ids):
        found = session.get(Batch, batch_id)
        if found is not None and found.status == BatchStatus.FINISHED and has_finished_cases(found):
            return found
    return None


def _store_reports(services: Services, batch: Batch) -> None:
    outputs = {
        "report.json": (render_json(batch).encode(), "application/json"),
        "report.csv": (render_csv(batch).encode(), "text/csv"),
        "report.md": (render_markdown(batch).encode(), "text/markdown"),
    }
    for name, (data, mime) in outputs.items():
        try:
            services.store.put_bytes(f"batches/{batch.id}/{name}", data, content_type=mime)
        except StoreUnavailable as exc:  # the row has everything; the files are a convenience
            log.warning("batch %s: could not store %s (%s)", batch.id, name, exc)
