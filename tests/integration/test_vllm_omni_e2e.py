"""Wan2.1 on vLLM-Omni through REAL workers: two card groups share a pool of two stand-in
instances (Redis leases: never two jobs on one instance), async and sync requests, the server's
telemetry in the RunReport, and its failures as job errors."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import select

from jobservice.db.tables import FleetEvent
from tests.conftest import free_port
from tests.integration.conftest import Stack, build_stack
from tests.standins.deploy import write_deployment
from tests.standins.jobs import job_log, report
from tests.standins.servers import FakeVllmOmni

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SERVED = "/data/models/Wan2.1-T2V-1.3B-Diffusers"
STANDIN = Path(__file__).resolve().parents[1] / "standins" / "vllm_serve.py"
SMALL = {"width": 64, "height": 48, "num_frames": 17, "fps": 16, "num_inference_steps": 8}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, list[FakeVllmOmni]]]:
    tmp = tmp_path_factory.mktemp("vllm")
    servers = [FakeVllmOmni(tmp / f"instance{i}", model=SERVED, gen_seconds=1.0).start() for i in range(2)]
    urls = [s.url for s in servers]
    common = {"served_model": SERVED, "poll_interval": 0.2, "timeout": 8, "api_key": "k3y"}
    deployment = write_deployment(
        tmp / "deploy.yaml",
        {
            "reference_models": False,
            "models": {
                "wan2.1-t2v-1.3b": {"endpoints": urls, **common},
                "wan-sync": {"backend": "vllm-omni", "mode": "sync", "endpoints": urls, **common},
            },
            "workers": [
                {"devices": "npu:0,1", "models": ["wan2.1-t2v-1.3b", "wan-sync"]},
                {"devices": "npu:2,3", "models": ["wan2.1-t2v-1.3b"]},
            ],
        },
    )
    stack = build_stack(tmp / "stack", deployment_file=deployment)
    stack.start_worker("cfg01", devices="npu:0,1")
    stack.start_worker("cfg23", devices="npu:2,3")
    yield stack, servers
    stack.close()
    for server in servers:
        server.stop()


@pytest.fixture
def vllm(site: tuple[Stack, list[FakeVllmOmni]]) -> Iterator[tuple[Stack, list[FakeVllmOmni]]]:
    for server in site[1]:
        server.mode, server.max_active = "ok", 0
        server.requests.clear()
    yield site


def submit(stack: Stack, model: str = "wan2.1-t2v-1.3b", **params: Any) -> str:
    return stack.submit({"model": model, "prompt": "a lighthouse in a storm", **SMALL, **params})


def test_jobs_spread_over_the_pool_one_at_a_time_per_instance(vllm: Any) -> None:
    stack, servers = vllm
    ids = [submit(stack, seed=i) for i in range(4)]
    jobs = [stack.wait(job_id, timeout=60) for job_id in ids]
    assert [j.status for j in jobs] == ["succeeded"] * 4, [(j.error_code, j.error_message) for j in jobs]
    assert all(s.max_active == 1 for s in servers), "each instance ran one job at a time, and both were used"
    assert sum(len(s.requests) for s in servers) == 4
    assert {j.worker_id.split("#")[0] for j in jobs} == {"cfg01@test", "cfg23@test"}
    form = servers[0].requests[0]["form"]
    assert form["model"] == SERVED and form["num_frames"] == "17" and form["guidance_scale"] == "4.0"
    assert servers[0].requests[0]["auth"] == "Bearer k3y"
    data = report(stack, str(jobs[0].id))
    assert data["execution_mode"] == "http" and data["validation"]["verdict"] == "passed"
    assert data["timings"]["server_inference_ms"] > 0 and data["memory"]["server_peak_mb"] == 4096.5
    assert data["extra"]["instance"] in {s.url for s in servers}
    assert "vllm-omni: accepted as video_gen_" in job_log(stack, str(jobs[0].id))


def test_sync_requests_record_the_headers(vllm: Any) -> None:
    stack, servers = vllm
    job = stack.wait(submit(stack, model="wan-sync"), timeout=60)
    assert job.status == "succeeded", job.error_message
    data = report(stack, str(job.id))
    assert data["timings"]["server_inference_ms"] == 2500.0 and data["timings"]["server_diffuse_ms"] == 1750.0
    assert any(r["path"] == "/v1/videos/sync" for s in servers for r in s.requests)


@pytest.mark.parametrize(
    ("model", "mode", "code"),
    [
        ("wan2.1-t2v-1.3b", "reject", "request_rejected"),
        ("wan2.1-t2v-1.3b", "oom", "out_of_memory"),
        ("wan-sync", "timeout", "upstream_timeout"),
        ("wan2.1-t2v-1.3b", "black", "validation_failed"),
    ],
)
def test_server_failures_are_job_errors(vllm: Any, model: str, mode: str, code: str) -> None:
    stack, servers = vllm
    for server in servers:
        server.mode = mode
    job = stack.wait(submit(stack, model=model), timeout=60)
    assert job.status == "failed" and job.error_code == code, job.error_message
    for server in servers:
        server.mode = "ok"
    assert stack.wait(submit(stack), timeout=60).status == "succeeded"


def test_a_server_stuck_in_progress_hits_the_client_deadline(vllm: Any) -> None:
    stack, servers = vllm
    for server in servers:
        server.mode = "hang"
    job = stack.wait(submit(stack), timeout=40)
    assert job.status == "failed" and job.error_code == "timeout"
    assert sum(len(s.deleted) for s in servers) >= 1, "the stuck server job was deleted"


def test_cancel_deletes_the_server_job(vllm: Any) -> None:
    stack, servers = vllm
    for server in servers:
        server.mode = "hang"
    deleted = sum(len(s.deleted) for s in servers)
    job_id = submit(stack)
    stack.wait(job_id, predicate=lambda j: j.status == "running", timeout=30)
    assert stack.client.post(f"/jobs/{job_id}/cancel").status_code == 202
    assert stack.wait(job_id, timeout=20).status == "canceled"
    assert sum(len(s.deleted) for s in servers) == deleted + 1


def test_readyz_shows_both_card_groups(vllm: Any) -> None:
    stack, _ = vllm
    workers = {w["devices"]: w["models"] for w in stack.client.get("/readyz").get_json()["workers"]}
    assert workers == {"npu:0,1": ["wan2.1-t2v-1.3b", "wan-sync"], "npu:2,3": ["wan2.1-t2v-1.3b"]}


def test_a_server_the_worker_starts_is_resident_and_evicted_like_a_model(tmp_path: Path) -> None:
    """``serve_command``: the worker starts ``vllm serve ... --omni`` on its own cards when it takes the
    group's first Wan2.1 job (the model's cold load), and stops it when the fleet evicts Wan2.1 to
    make room for another model."""
    port = free_port()
    argv = [
        sys.executable,
        str(STANDIN),
        "serve",
        SERVED,
        "--omni",
        "--port",
        "{port}",
        "--startup-seconds",
        "1",
    ]
    deployment = write_deployment(
        tmp_path / "deploy.yaml",
        {
            "models": {
                "wan-own": {
                    "backend": "vllm-omni",
                    "serve_command": argv,
                    "serve_port": port,
                    "served_model": SERVED,
                    "poll_interval": 0.2,
                    "min_memory_gb": 3,
                    "timeout": 30,
                }
            }
        },
    )
    stack = build_stack(tmp_path / "stack", deployment_file=deployment)
    try:
        stack.start_worker(
            "own",
            extra_env={
                "JOBSERVICE_WORKER_MEMORY_GB": "4",
                "JOBSERVICE_WORKER_MODELS": '["wan-own", "fake-heavy-a"]',
            },
        )
        first = stack.wait(submit(stack, model="wan-own"), timeout=120)
        assert first.status == "succeeded", (first.error_code, first.error_message)
        assert first.cold_start is True
        assert requests.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        again = stack.wait(submit(stack, model="wan-own"), timeout=120)
        assert again.status == "succeeded" and again.cold_start is False  # the server stayed up

        other = stack.wait(
            stack.submit({"model": "fake-heavy-a", "num_frames": 12, "fps": 12, "size": 32}), timeout=120
        )
        assert other.status == "succeeded"
        with pytest.raises(requests.ConnectionError):  # evicted: the server is gone, its memory back
            requests.get(f"http://127.0.0.1:{port}/health", timeout=5)
        with stack.services.db.session() as s:
            kinds = [(e.kind, e.model) for e in s.scalars(select(FleetEvent).order_by(FleetEvent.id))]
        assert kinds == [("load", "wan-own"), ("evict", "wan-own"), ("load", "fake-heavy-a")]
    finally:
        stack.close()
