"""The card's duty cycle: N small jobs queued at once for one worker.

duty_cycle  = sum of the jobs' generate times / wall time from the first claim to the last finish
gap_ms_p50  = p50 of (a job's claim - the previous job's finish), in claim order
duty_off_card_ms_p50 = p50 of (claim -> succeeded) - generate: what a job spends off the card

Everything is read back from the jobs table (claimed_at, finished_at, timings.generate_ms), so the
figures are the service's own clock, not the benchmark's polling.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from jobservice.db.engine import Database


def pct(values: list[float], q: float) -> float:
    """The q-quantile of ``values`` (linear interpolation), rounded to microseconds."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return round(ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo), 3)


def rows_of(db: Database, job_ids: list[str]) -> list[dict[str, Any]]:
    """claimed_at, finished_at and generate_ms of each job, in claim order."""
    from jobservice.jobs.queries import get_job

    rows = []
    with db.session() as session:
        for job_id in job_ids:
            row = get_job(session, uuid.UUID(job_id))
            assert row is not None and row.claimed_at and row.finished_at, job_id
            assert row.status.value == "succeeded", (job_id, row.status, row.error_message)
            timings = row.timings or {}
            rows.append(
                {
                    "claimed": row.claimed_at,
                    "finished": row.finished_at,
                    "generate_ms": float(timings["generate_ms"]),
                }
            )
    return sorted(rows, key=lambda r: r["claimed"])


def duty_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The duty-cycle figures of finished jobs (claim order)."""
    wall_ms = (rows[-1]["finished"] - rows[0]["claimed"]).total_seconds() * 1000
    generate_ms = sum(r["generate_ms"] for r in rows)
    gaps = [
        (nxt["claimed"] - prev["finished"]).total_seconds() * 1000
        for prev, nxt in zip(rows[:-1], rows[1:], strict=True)
    ]
    busy = [(r["finished"] - r["claimed"]).total_seconds() * 1000 - r["generate_ms"] for r in rows]
    return {
        "duty_cycle": round(generate_ms / wall_ms, 4),
        "duty_wall_ms_per_job": round(wall_ms / len(rows), 1),  # throughput, whatever the cycle
        "gap_ms_p50": pct(gaps, 0.5),
        "gap_ms_p95": pct(gaps, 0.95),
        "duty_off_card_ms_p50": pct(busy, 0.5),
        "duty_generate_ms_median": round(statistics.median(r["generate_ms"] for r in rows), 1),
        "duty_jobs": len(rows),
    }


def measure_duty(
    db: Database, *, submit: Callable[[int], str], wait: Callable[[str], dict[str, Any]], jobs: int = 20
) -> dict[str, Any]:
    """Queue ``jobs`` jobs at once (``submit(i)`` returns an id), wait for all, and measure."""
    time.sleep(0.5)  # the worker idle, the previous job's after-work done
    ids = [submit(i) for i in range(jobs)]
    for job_id in ids:
        job = wait(job_id)
        assert job["status"] == "succeeded", job
    return duty_figures(rows_of(db, ids))
