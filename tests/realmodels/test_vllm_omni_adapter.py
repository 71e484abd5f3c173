"""The vLLM-Omni adapter and its instance pool against stand-in vLLM-Omni servers (real Redis)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_lib

from jobservice.families.vllm_omni import VllmWanParams
from jobservice.fleet.placement import parse_devices
from tests.fakes.context import RecordingContext
from tests.realmodels.conftest import deployed_spec
from tests.standins.servers import FakeVllmOmni
from workers.adapters.base import AdapterError, JobCanceled, JobInputs
from workers.adapters.processes.instance_pool import InstancePool
from workers.adapters.vllm_omni import VllmHandle, VllmOmniAdapter

MODEL = "Wan2.1-T2V-1.3B-Diffusers"


def params(**overrides: Any) -> dict[str, Any]:
    base = {
        "prompt": "a lighthouse in a storm",
        "width": 64,
        "height": 48,
        "num_frames": 17,
        "fps": 16,
        "seed": 42,
    }
    return VllmWanParams.model_validate({**base, **overrides}).model_dump(mode="json")


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[FakeVllmOmni]]:
    started = [FakeVllmOmni(tmp_path / f"s{i}", model=MODEL).start() for i in range(2)]
    yield started
    for server in started:
        server.stop()


@pytest.fixture
def redis(clean_redis: str) -> redis_lib.Redis:
    return redis_lib.Redis.from_url(clean_redis)


def adapter_for(
    tmp_path: Path, endpoints: list[str], redis: redis_lib.Redis, **entry: Any
) -> tuple[VllmOmniAdapter, VllmHandle]:
    spec = deployed_spec(
        tmp_path,
        "wan2.1-t2v-1.3b",
        {"endpoints": endpoints, "served_model": MODEL, "poll_interval": 0.1, **entry},
    )
    adapter = VllmOmniAdapter(redis=redis)
    return adapter, adapter.load(
        parse_devices("npu:0,1"), {**spec.config, "_runtime": {"worker_id": "w@test"}}
    )


def inputs_for(ctx: RecordingContext, **overrides: Any) -> JobInputs:
    return JobInputs(
        job_id="j", model="wan2.1-t2v-1.3b", params=params(**overrides), files={}, scratch=ctx.scratch
    )


def test_async_generation_sends_the_form_and_records_the_server_telemetry(
    tmp_path: Path, servers: list[FakeVllmOmni], redis: redis_lib.Redis, ctx: RecordingContext
) -> None:
    adapter, handle = adapter_for(tmp_path, [servers[0].url], redis, api_key="secret")
    out = adapter.run(handle, inputs_for(ctx, negative_prompt="blur", flow_shift=3.0), ctx)
    (request,) = servers[0].requests
    assert request["path"] == "/v1/videos" and request["content_type"] == "multipart/form-data"
    assert request["auth"] == "Bearer secret"
    assert request["form"] == {
        "prompt": "a lighthouse in a storm",
        "negative_prompt": "blur",
        "width": "64",
        "height": "48",
        "num_frames": "17",
        "fps": "16",
        "num_inference_steps": "50",
        "guidance_scale": "4.0",
        "flow_shift": "3.0",
        "seed": "42",
        "model": MODEL,
    }
    assert out.video_path is not None and out.video_path.stat().st_size > 0
    assert out.expected is not None and (out.expected.width, out.expected.num_frames, out.expected.fps) == (
        64,
        17,
        16.0,
    )
    assert (
        ctx.timings["server_minimaxh3pipeline_diffuse_ms"] == 1750.0
        and ctx.timings["server_queue_wait_ms"] == 12.5
    )
    assert ctx.memory["server_peak_mb"] == 4096.5 and ctx.timings["server_inference_ms"] > 0
    assert ctx.progress_log and max(ctx.fractions) < 1.0
    assert handle.pool.holder(servers[0].url) is None, "the lease is released"


def test_sync_generation_reads_the_headers(
    tmp_path: Path, servers: list[FakeVllmOmni], redis: redis_lib.Redis, ctx: RecordingContext
) -> None:
    adapter, handle = adapter_for(tmp_path, [servers[0].url], redis, mode="sync")
    out = adapter.run(handle, inputs_for(ctx), ctx)
    assert servers[0].requests[0]["path"] == "/v1/videos/sync"
    assert out.video_path is not None and out.video_path.stat().st_size > 0
    assert ctx.timings["server_inference_ms"] == 2500.0 and ctx.timings["server_vae_decode_ms"] == 250.0
    assert ctx.memory["server_peak_mb"] == 4096.5 and str(ctx.extra["request_id"]).startswith("video_sync-")


@pytest.mark.parametrize(
    ("mode", "server_mode", "code"),
    [
        ("async", "reject", "request_rejected"),
        ("async", "oom", "out_of_memory"),
        ("sync", "timeout", "upstream_timeout"),
        ("sync", "oom", "out_of_memory"),
        ("sync", "reject", "request_rejected"),
    ],
)
def test_server_answers_become_job_errors(
    tmp_path: Path,
    servers: list[FakeVllmOmni],
    redis: redis_lib.Redis,
    ctx: RecordingContext,
    mode: str,
    server_mode: str,
    code: str,
) -> None:
    servers[0].mode = server_mode
    adapter, handle = adapter_for(tmp_path, [servers[0].url], redis, mode=mode)
    with pytest.raises(AdapterError) as failure:
        adapter.run(handle, inputs_for(ctx), ctx)
    assert failure.value.code == code, failure.value.message
    assert handle.pool.holder(servers[0].url) is None


def test_cancel_deletes_the_server_job_and_frees_the_instance(
    tmp_path: Path, servers: list[FakeVllmOmni], redis: redis_lib.Redis, ctx: RecordingContext
) -> None:
    servers[0].mode = "hang"  # stays in_progress forever, as vllm-omni #2327 describes
    adapter, handle = adapter_for(tmp_path, [servers[0].url], redis)
    started = time.monotonic()
    ctx.cancel_when = lambda c: time.monotonic() - started > 1.0
    with pytest.raises(JobCanceled):
        adapter.run(handle, inputs_for(ctx), ctx)
    assert len(servers[0].deleted) == 1
    assert handle.pool.holder(servers[0].url) is None


def test_an_unreachable_instance_is_skipped(
    tmp_path: Path, servers: list[FakeVllmOmni], redis: redis_lib.Redis, ctx: RecordingContext
) -> None:
    from tests.conftest import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    adapter, handle = adapter_for(tmp_path, [dead, servers[1].url], redis)
    for _ in range(2):  # whichever is tried first, the job ends on the live one
        adapter.run(handle, inputs_for(ctx), ctx)
        ctx.format = None
    assert len(servers[1].requests) == 2 and ctx.extra["instance"] == servers[1].url


def test_all_instances_unreachable(tmp_path: Path, redis: redis_lib.Redis, ctx: RecordingContext) -> None:
    from tests.conftest import free_port

    adapter, handle = adapter_for(tmp_path, [f"http://127.0.0.1:{free_port()}"], redis)
    with pytest.raises(AdapterError) as failure:
        adapter.run(handle, inputs_for(ctx), ctx)
    assert failure.value.code == "instance_unreachable"


def test_pool_leases_are_exclusive_across_workers_and_expire(redis: redis_lib.Redis) -> None:
    endpoints = ["http://a:1", "http://b:1"]
    # A 3 s lease renewed every second: with 1 s (renewed every 0.33 s) a renewal thread starved for
    # 0.7 s by the other test process's load let a held lease expire in a fresh clone's CI run.
    first = InstancePool(endpoints, redis=redis, ttl_seconds=3.0)
    second = InstancePool(endpoints, redis=redis, ttl_seconds=3.0)  # another worker, same Redis
    a = first.acquire(owner="w1", check_cancel=lambda: None, timeout=1)
    b = second.acquire(owner="w2", check_cancel=lambda: None, timeout=1)
    assert {a.endpoint, b.endpoint} == set(endpoints)
    with pytest.raises(AdapterError) as busy:
        second.acquire(owner="w2", check_cancel=lambda: None, timeout=0.5)
    assert busy.value.code == "no_instance_available"
    time.sleep(4.5)  # held leases are renewed, so they outlive their ttl
    assert first.holder(a.endpoint) is not None and second.holder(b.endpoint) is not None
    a.release()
    c = second.acquire(owner="w2", check_cancel=lambda: None, timeout=1)
    assert c.endpoint == a.endpoint
    b.release()
    c.release()
    assert first.holder(a.endpoint) is None and first.holder(b.endpoint) is None


def test_a_pool_never_gives_one_instance_two_jobs(
    tmp_path: Path, servers: list[FakeVllmOmni], redis: redis_lib.Redis
) -> None:
    for server in servers:
        server.gen_seconds = 0.6
    results: list[str] = []

    def job(index: int) -> None:
        scratch = tmp_path / f"job{index}"
        scratch.mkdir()
        ctx = RecordingContext(scratch)
        adapter, handle = adapter_for(tmp_path / f"w{index}", [s.url for s in servers], redis)
        adapter.run(handle, inputs_for(ctx), ctx)
        results.append(str(ctx.extra["instance"]))

    threads = [threading.Thread(target=job, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == 4
    assert all(server.max_active <= 1 for server in servers), [s.max_active for s in servers]
    assert {len(s.requests) for s in servers} <= {1, 2, 3} and sum(len(s.requests) for s in servers) == 4
