"""GET /metrics after real jobs through a real Celery worker: the counts are the jobs that ran."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import Stack, build_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def metrics_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Settle 0: the jobs have finished before the scrape, so nothing is waiting for a late commit.
    s = build_stack(tmp_path_factory.mktemp("metrics"), metrics_settle_seconds=0.0)
    s.start_worker("metrics")
    yield s
    s.close()


def scrape(stack: Stack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = stack.client.get("/metrics")
    assert response.status_code == 200, response.get_data(as_text=True)
    samples = {}
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def pick(samples: dict[Any, float], name: str, **labels: str) -> float:
    """The sum over every series of ``name`` whose labels include ``labels``."""
    return sum(v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items())


def test_counts_and_histograms_match_the_jobs_that_ran(metrics_stack: Stack) -> None:
    stack = metrics_stack
    before = scrape(stack)
    bodies: list[dict[str, Any]] = [
        {"model": "fake-good", "num_frames": 12, "fps": 12},
        {"model": "fake-good", "num_frames": 12, "fps": 12},
        {"model": "fake-black", "num_frames": 24, "fps": 12},
        {"model": "fake-raises-mid-run"},
    ]
    ids = [stack.submit(body) for body in bodies]
    jobs = [stack.wait(job_id) for job_id in ids]
    after = scrape(stack)

    outcomes = Counter((j.model, str(j.status), j.error_code or "") for j in jobs)
    assert outcomes[("fake-good", "succeeded", "")] == 2, outcomes
    for (model, status, code), count in outcomes.items():
        name = "jobservice_jobs_finished_total"
        assert pick(after, name, model=model, status=status, error_code=code) == count, (model, status, code)
    assert pick(after, "jobservice_jobs_finished_total") == len(jobs)
    assert pick(after, "jobservice_jobs_submitted_total", source="api") == len(jobs)
    assert pick(after, "jobservice_jobs_submitted_total", model="fake-good") == 2

    failed_checks = Counter(c for j in jobs for c in (j.validation_summary or {}).get("failed_checks", []))
    assert failed_checks["black"] == 1
    for check, count in failed_checks.items():
        assert pick(after, "jobservice_qc_failures_total", check=check) == count, check
    assert pick(after, "jobservice_jobs_validated_total", model="fake-good", verdict="passed") == 2

    # Stage histograms: one observation per job that timed the stage, and the buckets add up.
    for stage in ("queue_wait", "generate", "encode", "validate", "upload", "total", "end_to_end"):
        timed = sum(1 for j in jobs if stage == "end_to_end" or f"{stage}_ms" in (j.timings or {}))
        observed = pick(after, "jobservice_job_stage_seconds_count", stage=stage)
        assert observed == timed and observed > 0, (stage, observed, timed)
        assert pick(after, "jobservice_job_stage_seconds_bucket", stage=stage, le="+Inf") == observed
        assert pick(after, "jobservice_job_stage_seconds_sum", stage=stage) >= 0
    generate_s = sum(j.timings["generate_ms"] for j in jobs if "generate_ms" in (j.timings or {})) / 1000
    assert pick(after, "jobservice_job_stage_seconds_sum", stage="generate") == pytest.approx(generate_s)

    # Live figures: nothing queued now, the worker online with its card group.
    assert pick(after, "jobservice_queue_depth") == 0
    assert pick(after, "jobservice_workers_online", devices="cpu", kind="cpu") == 1
    assert pick(after, "jobservice_model_workers_online", model="fake-good") == 1
    assert pick(after, "jobservice_metrics_database_up") == 1

    # HTTP: the four submissions, by URL rule (not raw path), and their latencies.
    posts = {"method": "POST", "route": "/jobs", "status": "202"}
    assert pick(after, "jobservice_http_requests_total", **posts) - pick(
        before, "jobservice_http_requests_total", **posts
    ) == len(bodies)
    assert stack.client.get(f"/jobs/{ids[0]}").status_code == 200
    routes = {dict(ls).get("route") for n, ls in scrape(stack) if n == "jobservice_http_requests_total"}
    assert "/jobs/<job_id>" in routes and not any(ids[0] in (r or "") for r in routes), routes
    latency = "jobservice_http_request_duration_seconds_count"
    assert (
        pick(after, latency, method="POST", route="/jobs")
        - pick(before, latency, method="POST", route="/jobs")
        == 4
    )
