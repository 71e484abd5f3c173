"""Finishing a batch: once every job ended, read the reports, check expectations, judge, record.

``refresh_batch`` is cheap while jobs still run (one query) and does the work exactly once: the
final write is a compare-and-swap from ``running`` to ``finished``, so the beat's periodic tick,
an API request and a waiting CLI may all call it. Before that write, a case may run more
(``looks.py``: disturbed repeats again, the next look of adaptive repeats): the batch then stays
running with the added jobs and is judged again when they end. The report files are also written
to the object store (``groups/<id>/report.{json,csv,md}``, beside its inputs) for people who read
the store rather than the API.

Each case is judged against its history of nights (``history.py`` reads the spec's earlier runs,
``verdicts.py`` states the error rates), or, until it has 5 reference runs, against the baseline
run (``choose_baseline``).
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
from jobservice.groups.service import group_prefix
from jobservice.nightly.compare import Night, compare_results, primary_metric, tracked_metrics
from jobservice.nightly.environment import environment_changes, runs_environment
from jobservice.nightly.figures import METRICS, RunFacts, figures_of, run_facts, samples_of, unavailable
from jobservice.nightly.history import EarlierRun, case_histories
from jobservice.nightly.looks import (
    CasePlan,
    case_plan,
    is_disturbed,
    job_seconds,
    looks_for,
    more_runs,
    used_runs,
)
from jobservice.nightly.render import render_csv, render_json, render_markdown
from jobservice.nightly.service import add_runs, get_batch
from jobservice.nightly.slots import has_finished_cases, latest_jobs, plan_of, slots
from jobservice.nightly.states import BatchStatus, mark_finished
from jobservice.nightly.stats import summarize
from jobservice.nightly.verdicts import MIN_REFERENCE
from jobservice.storage import ObjectNotFound, StoreUnavailable
from jobservice.wiring import Services

log = logging.getLogger(__name__)

# Runs that may be the baseline of a cold start by themselves: any that did not regress or fail
# (inconclusive ones count, as they do in the reference of nights).
GOOD_VERDICTS = ("passed", "no_baseline", "inconclusive")
ERROR_VERDICT = "error"  # the results could not be judged (a bug): recorded, never a baseline


def refresh_batch(services: Services, batch_id: uuid.UUID) -> Batch:
    """The batch, finished first if its last job has ended."""
    with services.db.session() as session:
        batch = get_batch(session, batch_id)
        if batch.status != BatchStatus.RUNNING or _has_active_job(session, batch_id):
            return batch
        jobs = latest_jobs(session, batch_id)
        expected = {(case["name"], repeat) for case, repeat in slots(batch.spec or {}, plan_of(batch))}
        if not expected <= set(jobs) or any(j.status not in TERMINAL_STATUSES for j in jobs.values()):
            return batch
    return finalize_batch(services, batch, jobs)


def _has_active_job(session: Session, batch_id: uuid.UUID) -> bool:
    # One row read instead of every job: GET /batches/<id> and its job pages refresh a running
    # nightly batch of 10,000 queued jobs on every request (scripts/bench_scale.py).
    active = select(Job.id).where(
        Job.batch_id == batch_id, Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING])
    )
    return session.scalar(active.limit(1)) is not None


def finalize_batch(services: Services, batch: Batch, jobs: dict[tuple[str, int], Job]) -> Batch:
    """Judge the batch; queue more runs first if a case asks for them (``looks.py``), else record
    the results, verdict and environment once."""
    _settle_earlier(services, batch)  # an earlier run that ended unseen may be this one's baseline
    plan = plan_of(batch)
    runs_by_case: dict[str, list[RunFacts]] = {}
    for (case, repeat), job in sorted(jobs.items()):
        runs_by_case.setdefault(case, []).append(_facts(services, job, repeat))
    with services.db.session() as session:
        runs_env = runs_environment(session, [r for runs in runs_by_case.values() for r in runs])
        baseline = choose_baseline(session, batch)
        earlier = earlier_runs(session, batch)
        outcome = judge(batch, runs_by_case, runs_env, baseline, earlier=earlier, plan=plan)
    more = _more_runs(batch, outcome, runs_by_case, jobs)
    if more:
        return add_runs(services, batch.id, {**plan, **{name: p.as_dict() for name, p in more.items()}})
    with services.db.session() as session:
        done = mark_finished(session, batch.id, baseline_id=baseline.id if baseline else None, **outcome)
    with services.db.session() as session:
        batch = get_batch(session, batch.id)
    if done:
        log.info("batch %s (%s) finished: %s", batch.id, batch.name, batch.verdict)
        _store_reports(services, batch)
    return batch


def _more_runs(
    batch: Batch,
    outcome: dict[str, Any],
    runs_by_case: dict[str, list[RunFacts]],
    jobs: dict[tuple[str, int], Job],
) -> dict[str, CasePlan]:
    """The cases that run more before this night is judged (none once it could not be judged)."""
    if outcome["verdict"] == ERROR_VERDICT:
        return {}
    results = outcome["results"]
    judged = {c["case"]: c for c in (results.get("comparison") or {}).get("cases") or []}
    # The plan so far, with the looks each case's night was judged with.
    planned = {c["name"]: c.get("looks") or {} for c in results.get("cases") or []}
    durations: dict[str, list[float]] = {}
    ends = []
    for (name, _), job in jobs.items():
        took = job_seconds(job.started_at, job.finished_at)
        if took is not None:
            durations.setdefault(name, []).append(took)
        if job.finished_at is not None:
            ends.append(job.finished_at)
    start = batch.submitted_at or batch.created_at
    elapsed = (max(ends) - start).total_seconds() if ends and start else 0.0
    return more_runs(
        list(batch.spec.get("cases") or []),
        runs_by_case,
        planned,
        judged=judged,
        durations=durations,
        elapsed_s=elapsed,
        budget_s=(batch.spec or {}).get("time_budget_s"),
    )


def judge(
    batch: Batch,
    runs_by_case: dict[str, list[RunFacts]],
    runs_env: dict[str, Any],
    baseline: Batch | None,
    *,
    earlier: list[EarlierRun] | None = None,
    plan: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The verdict, results and environment of a batch whose jobs all ended (no I/O). ``earlier``:
    the spec's earlier finished runs, newest first (``earlier_runs``): each case keeps its history
    from them (``reference``), what it was judged against. ``plan``: the runs the night added.

    Never raises: a bug in reading the runs or comparing them (data nobody foresaw) records the
    verdict ``error`` with the reason, instead of leaving the batch running for the tick to retry
    forever and every page that shows it answering 500.
    """
    environment = {**(batch.environment or {}), "runs": runs_env}
    cases: list[dict[str, Any]] = []
    plan = plan or {}
    earlier = earlier or []
    try:
        spec = batch.spec
        cases = [
            case_results(c, runs_by_case.get(c["name"], []), level=case_plan(plan, c).level)
            for c in spec.get("cases") or []
        ]
        histories = case_histories(cases, tracked_metrics(spec), earlier)
        primary = primary_metric(spec)
        for case, spec_case in zip(cases, spec.get("cases") or [], strict=True):
            history = histories[case["name"]]
            case["reference"] = {name: h.as_dict() for name, h in history.items()}
            main = history.get(primary)
            drift = main.drift if main is not None and len(main.reference) >= MIN_REFERENCE else None
            case["looks"] = {**case_plan(plan, spec_case).as_dict(), "looks": looks_for(drift)}
        results: dict[str, Any] = {"cases": cases, "comparison": None, "plan": plan}
        since_last = environment_changes(earlier[0].environment, environment) if earlier else []
        if baseline is not None or any(
            len(h.reference) >= MIN_REFERENCE for by_metric in histories.values() for h in by_metric.values()
        ):
            night = Night(run_id=str(batch.id), use_history=True, environment_changed=bool(since_last))
            comparison = compare_results(
                baseline.results if baseline else None, results, spec=spec, night=night
            )
            comparison["baseline_id"] = str(baseline.id) if baseline else None
            results["comparison"] = comparison
            environment["changes"] = (
                environment_changes(baseline.environment or {}, environment) if baseline else since_last
            )
        environment["changes_since_last"] = since_last
    except Exception as exc:  # noqa: BLE001 - recorded as the batch's error, see above
        log.exception("batch %s: its results could not be judged", batch.id)
        error = f"The results could not be judged ({type(exc).__name__}: {exc}); this is a bug."
        return {
            "verdict": ERROR_VERDICT,
            "results": {"cases": cases, "comparison": None, "plan": plan},
            "environment": environment,
            "error": error[:2000],
        }
    comparison = results["comparison"]
    if any(c["status"] == "failed" for c in cases):
        verdict = "failed"
    elif comparison is None or not comparison.get("judged_cases"):
        verdict = "no_baseline"
    else:
        compared = comparison["verdict"]
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


def case_results(case: dict[str, Any], runs: list[RunFacts], *, level: int | None = None) -> dict[str, Any]:
    """One case's runs, samples per metric, frame fingerprints and expectation checks. The samples
    are those of ``level`` runs (default: the spec's repeats), undisturbed runs first (``looks.py``)."""
    used = used_runs(runs, level or int(case.get("repeat") or len(runs)))
    chosen = {id(r) for r in used}
    samples = {name: samples_of(used, metric) for name, metric in METRICS.items()}
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
        "runs": [{**r.as_dict(), "used": id(r) in chosen, "disturbed": is_disturbed(r)} for r in runs],
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


SCAN_LIMIT = 100  # earlier runs read for a case's history (a pin ends the reading sooner)


def earlier_runs(session: Session, batch: Batch) -> list[EarlierRun]:
    """The spec's finished runs before ``batch``, newest first, back to the pinned one (a pin
    restarts the history) and at most ``SCAN_LIMIT``: what each case's history is chosen from
    (``history.py``)."""
    rows = session.execute(
        select(Batch.id, Batch.created_at, Batch.pinned, Batch.results, Batch.environment)
        .where(
            Batch.name == batch.name,
            Batch.tenant == batch.tenant,
            Batch.id != batch.id,
            Batch.status == BatchStatus.FINISHED,
            Batch.created_at < batch.created_at,
        )
        .order_by(Batch.created_at.desc())
        .limit(SCAN_LIMIT)
    )
    found = []
    for row in rows:
        results = row.results if isinstance(row.results, dict) else {}
        env = row.environment if isinstance(row.environment, dict) else {}
        found.append(EarlierRun(str(row.id), row.created_at, bool(row.pinned), results, env))
        if row.pinned:
            break
    return found


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
            services.store.put_bytes(f"{group_prefix(batch.id)}{name}", data, content_type=mime)
        except StoreUnavailable as exc:  # the row has everything; the files are a convenience
            log.warning("batch %s: could not store %s (%s)", batch.id, name, exc)
