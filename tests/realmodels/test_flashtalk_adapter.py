"""The FlashTalk adapter and its resident pipelines against the stand-in resident worker."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobservice.families.flashtalk import FlashTalkParams
from jobservice.fleet.placement import parse_devices
from tests.fakes.context import RecordingContext
from tests.realmodels.conftest import deployed_spec
from tests.standins.deploy import FakeCheckout, flashtalk_checkout
from workers.adapters.base import AdapterError, JobCanceled, JobInputs, RunOutput
from workers.adapters.processes.memory import CardMemory
from workers.adapters.soulx.flashtalk import FlashTalkAdapter, FlashTalkHandle


def ft_params(**overrides: Any) -> dict[str, Any]:
    return FlashTalkParams.model_validate({"height": 256, "width": 256, **overrides}).model_dump(mode="json")


@pytest.fixture
def checkout(tmp_path: Path) -> FakeCheckout:
    return flashtalk_checkout(tmp_path / "site")


def loaded(
    tmp_path: Path, checkout: FakeCheckout, adapter: FlashTalkAdapter | None = None, **entry: Any
) -> tuple[FlashTalkAdapter, FlashTalkHandle]:
    """An adapter and its handle on npu:4-7 (chunk_timeout and cancel_grace 5 s unless given)."""
    entry = checkout.script_entry(
        resident_script=checkout.extra["resident_script"],
        cards=4,
        **{"chunk_timeout": 5, "cancel_grace": 5, **entry},
    )
    spec = deployed_spec(tmp_path, "soulx-flashtalk-14b", entry)
    adapter = adapter or FlashTalkAdapter(memory_reader=lambda device: None)
    config = {**spec.config, "_runtime": {"state_dir": str(tmp_path / "state")}}
    return adapter, adapter.load(parse_devices("npu:4-7"), config)


@pytest.fixture
def adapter_and_handle(
    tmp_path: Path, checkout: FakeCheckout
) -> Iterator[tuple[FlashTalkAdapter, FlashTalkHandle]]:
    adapter, handle = loaded(tmp_path, checkout)
    yield adapter, handle
    adapter.unload(handle)


def fresh(tmp_path: Path, name: str) -> RecordingContext:
    scratch = tmp_path / name
    scratch.mkdir()
    return RecordingContext(scratch)


def run_job(
    adapter: FlashTalkAdapter,
    handle: FlashTalkHandle,
    job_inputs: Callable[..., JobInputs],
    run_ctx: RecordingContext,
    **params: Any,
) -> RunOutput:
    """One job in ``run_ctx``'s scratch folder."""
    inputs = job_inputs("soulx-flashtalk-14b", ft_params(**params))
    inputs.scratch = run_ctx.scratch
    return adapter.run(handle, inputs, run_ctx)


def test_resident_is_started_once_and_reused(
    tmp_path: Path,
    checkout: FakeCheckout,
    adapter_and_handle: tuple[FlashTalkAdapter, FlashTalkHandle],
    job_inputs: Callable[..., JobInputs],
    ctx: RecordingContext,
) -> None:
    adapter, handle = adapter_and_handle
    out = adapter.run(handle, job_inputs("soulx-flashtalk-14b", ft_params()), ctx)
    assert ctx.cold_start is True and ctx.extra["pipeline_reused"] is False
    assert out.frames_generated == 50 == ctx.frame_count  # 2 s of speech at 25 fps, padded chunk trimmed
    assert ctx.format is not None and (ctx.format.width, ctx.format.height, ctx.format.num_frames) == (
        256,
        256,
        50,
    )
    assert [c.index for c in ctx.chunks] == [0, 1] and ctx.chunks[0].core_ms == 6000.0
    second = fresh(tmp_path, "second")
    second_inputs = job_inputs("soulx-flashtalk-14b", ft_params(seed=1))
    second_inputs.scratch = second.scratch
    adapter.run(handle, second_inputs, second)
    assert second.cold_start is False and second.extra["pipeline_reused"] is True
    launches = checkout.records("flashtalk_resident")
    assert len(launches) == 4, "one launch: four ranks under torchrun, once"
    (torchrun,) = checkout.records("torchrun")
    assert torchrun["nproc"] == 4
    env = launches[0]["env"]
    assert env["ASCEND_RT_VISIBLE_DEVICES"] == "4,5,6,7" and env["GPU_NUM"] == "4"
    assert (
        env["FLASHTALK_FRAME_NUM"],
        env["FLASHTALK_MOTION_FRAMES_NUM"],
        env["FLASHTALK_SAMPLE_STEPS"],
    ) == ("29", "1", "2")
    assert env["FLASHTALK_COLOR_CORRECTION_STRENGTH"] == "0.0" and env["FAKE_ASCEND_ENV"] == "1"
    ops = [r["op"] for r in checkout.records("flashtalk_op")]
    assert ops == ["start", "chunk", "chunk", "end", "start", "chunk", "chunk", "end"]


def test_settings_that_force_a_reload_evict_the_old_pipeline(
    tmp_path: Path,
    checkout: FakeCheckout,
    adapter_and_handle: tuple[FlashTalkAdapter, FlashTalkHandle],
    job_inputs: Callable[..., JobInputs],
    ctx: RecordingContext,
) -> None:
    adapter, handle = adapter_and_handle
    adapter.run(handle, job_inputs("soulx-flashtalk-14b", ft_params()), ctx)
    first_pid = ctx.extra["resident"]["pid"]
    other = fresh(tmp_path, "other")
    inputs = job_inputs("soulx-flashtalk-14b", ft_params(sample_steps=4))
    inputs.scratch = other.scratch
    adapter.run(handle, inputs, other)
    assert other.extra["pipeline_reused"] is False and other.extra["pipeline_key"]["sample_steps"] == 4
    assert len(handle.residents) == 1, "pipeline_cache_size 1 keeps one resident"
    assert _gone(first_pid), "the evicted resident must be shut down"


def test_cancel_at_a_chunk_boundary_keeps_the_resident(
    tmp_path: Path,
    checkout: FakeCheckout,
    adapter_and_handle: tuple[FlashTalkAdapter, FlashTalkHandle],
    job_inputs: Callable[..., JobInputs],
    ctx: RecordingContext,
) -> None:
    adapter, handle = adapter_and_handle
    checkout.set_mode("slow_chunks:0.5")
    ctx.cancel_when = lambda c: len(c.chunks) >= 1
    with pytest.raises(JobCanceled):
        adapter.run(handle, job_inputs("soulx-flashtalk-14b", ft_params()), ctx)
    checkout.set_mode("ok")
    nxt = fresh(tmp_path, "next")
    inputs = job_inputs("soulx-flashtalk-14b", ft_params())
    inputs.scratch = nxt.scratch
    adapter.run(handle, inputs, nxt)
    assert nxt.extra["pipeline_reused"] is True and nxt.frame_count == 50


def test_out_of_memory_in_a_chunk_fails_the_job_not_the_resident(
    tmp_path: Path,
    checkout: FakeCheckout,
    adapter_and_handle: tuple[FlashTalkAdapter, FlashTalkHandle],
    job_inputs: Callable[..., JobInputs],
    ctx: RecordingContext,
) -> None:
    adapter, handle = adapter_and_handle
    checkout.set_mode("oom")
    with pytest.raises(AdapterError) as failure:
        adapter.run(handle, job_inputs("soulx-flashtalk-14b", ft_params()), ctx)
    assert failure.value.code == "out_of_memory"
    checkout.set_mode("ok")
    nxt = fresh(tmp_path, "next")
    inputs = job_inputs("soulx-flashtalk-14b", ft_params())
    inputs.scratch = nxt.scratch
    adapter.run(handle, inputs, nxt)
    assert nxt.extra["pipeline_reused"] is True


def test_a_crashed_resident_is_replaced(
    tmp_path: Path,
    checkout: FakeCheckout,
    adapter_and_handle: tuple[FlashTalkAdapter, FlashTalkHandle],
    job_inputs: Callable[..., JobInputs],
    ctx: RecordingContext,
) -> None:
    adapter, handle = adapter_and_handle
    checkout.set_mode("crash")
    with pytest.raises(AdapterError) as failure:
        adapter.run(handle, job_inputs("soulx-flashtalk-14b", ft_params()), ctx)
    assert failure.value.code == "model_crashed" and "139" in failure.value.message
    assert "Segmentation fault" in ctx.log_text()
    checkout.set_mode("ok")
    nxt = fresh(tmp_path, "next")
    inputs = job_inputs("soulx-flashtalk-14b", ft_params())
    inputs.scratch = nxt.scratch
    adapter.run(handle, inputs, nxt)
    assert nxt.extra["pipeline_reused"] is False


def test_a_hung_chunk_is_stopped_at_chunk_timeout(
    tmp_path: Path,
    checkout: FakeCheckout,
    adapter_and_handle: tuple[FlashTalkAdapter, FlashTalkHandle],
    job_inputs: Callable[..., JobInputs],
    ctx: RecordingContext,
) -> None:
    adapter, handle = adapter_and_handle
    checkout.set_mode("hang")
    started = time.monotonic()
    with pytest.raises(AdapterError) as failure:
        adapter.run(handle, job_inputs("soulx-flashtalk-14b", ft_params()), ctx)
    assert failure.value.code == "model_hung" and time.monotonic() - started < 15
    assert not handle.residents


def test_max_chunks_caps_the_video_and_its_expected_duration(
    tmp_path: Path,
    adapter_and_handle: tuple[FlashTalkAdapter, FlashTalkHandle],
    job_inputs: Callable[..., JobInputs],
    ctx: RecordingContext,
) -> None:
    adapter, handle = adapter_and_handle
    out = adapter.run(handle, job_inputs("soulx-flashtalk-14b", ft_params(max_chunks=1)), ctx)
    assert out.frames_generated == 28 and ctx.format is not None
    assert ctx.format.expected_duration_s == pytest.approx(28 / 25)


def test_budget_is_checked_before_a_resident_starts(
    tmp_path: Path, checkout: FakeCheckout, job_inputs: Callable[..., JobInputs], ctx: RecordingContext
) -> None:
    entry = checkout.script_entry(resident_script=checkout.extra["resident_script"], cards=4)
    spec = deployed_spec(tmp_path, "soulx-flashtalk-14b", entry)
    cards = [CardMemory("npu", i, free_mb=10 * 1024) for i in (4, 5, 6, 7)]
    adapter = FlashTalkAdapter(memory_reader=lambda device: cards)
    handle = adapter.load(
        parse_devices("npu:4-7"), {**spec.config, "_runtime": {"state_dir": str(tmp_path / "s")}}
    )
    with pytest.raises(AdapterError) as failure:
        adapter.run(handle, job_inputs("soulx-flashtalk-14b", ft_params()), ctx)
    assert failure.value.code == "insufficient_device_memory" and "64 GB in total" in failure.value.message
    assert checkout.records() == []


def test_every_request_carries_an_id_that_its_answer_echoes(
    checkout: FakeCheckout,
    adapter_and_handle: tuple[FlashTalkAdapter, FlashTalkHandle],
    job_inputs: Callable[..., JobInputs],
    ctx: RecordingContext,
) -> None:
    adapter, handle = adapter_and_handle
    adapter.run(handle, job_inputs("soulx-flashtalk-14b", ft_params()), ctx)
    ids = [r["id"] for r in checkout.records("flashtalk_op")]
    assert all(isinstance(i, int) for i in ids) and len(set(ids)) == len(ids)


def test_a_cancel_with_start_in_flight_does_not_desynchronise_the_next_job(
    tmp_path: Path,
    checkout: FakeCheckout,
    adapter_and_handle: tuple[FlashTalkAdapter, FlashTalkHandle],
    job_inputs: Callable[..., JobInputs],
    ctx: RecordingContext,
) -> None:
    adapter, handle = adapter_and_handle
    adapter.run(handle, job_inputs("soulx-flashtalk-14b", ft_params()), ctx)  # the resident is warm
    checkout.set_mode("slow_start:1")
    canceled = fresh(tmp_path, "canceled")
    canceled.cancel_when = lambda c: True  # canceled while its start is being answered
    with pytest.raises(JobCanceled):
        run_job(adapter, handle, job_inputs, canceled)
    checkout.set_mode("ok")
    nxt = fresh(tmp_path, "next")
    out = run_job(adapter, handle, job_inputs, nxt)
    assert nxt.extra["pipeline_reused"] is True and out.frames_generated == 50 == nxt.frame_count
    assert nxt.extra["resident"]["pid"] == ctx.extra["resident"]["pid"]


@pytest.mark.parametrize("mode", ["slow_end:3", "slow_start:3"])
def test_a_resident_that_does_not_settle_within_cancel_grace_is_replaced(
    tmp_path: Path,
    checkout: FakeCheckout,
    job_inputs: Callable[..., JobInputs],
    ctx: RecordingContext,
    mode: str,
) -> None:
    adapter, handle = loaded(tmp_path, checkout, cancel_grace=0.5)
    try:
        adapter.run(handle, job_inputs("soulx-flashtalk-14b", ft_params()), ctx)
        first_pid = ctx.extra["resident"]["pid"]
        checkout.set_mode(mode)
        canceled = fresh(tmp_path, "canceled")
        # slow_end: canceled between chunks, and the resident takes too long to drop the job;
        # slow_start: canceled with the start in flight, which is not answered within the grace.
        canceled.cancel_when = (
            (lambda c: len(c.chunks) >= 1) if mode.startswith("slow_end") else (lambda c: True)
        )
        with pytest.raises(JobCanceled):
            run_job(adapter, handle, job_inputs, canceled)
        assert not handle.residents and _gone(first_pid), "a resident out of step must be discarded"
        checkout.set_mode("ok")
        nxt = fresh(tmp_path, "next")
        out = run_job(adapter, handle, job_inputs, nxt)
        assert nxt.extra["pipeline_reused"] is False and out.frames_generated == 50
    finally:
        adapter.unload(handle)


def test_only_the_last_resident_logs_are_kept(
    tmp_path: Path, checkout: FakeCheckout, job_inputs: Callable[..., JobInputs], ctx: RecordingContext
) -> None:
    adapter, handle = loaded(
        tmp_path, checkout, FlashTalkAdapter(memory_reader=lambda device: None, resident_logs_kept=2)
    )
    try:
        for i, steps in enumerate((2, 4, 2, 4)):  # pipeline_cache_size 1: every job starts a resident
            run_job(adapter, handle, job_inputs, fresh(tmp_path, f"job{i}"), sample_steps=steps)
        logs = sorted((tmp_path / "state" / "flashtalk").glob("resident-*.log"))
        (live,) = handle.residents.values()
        assert len(logs) == 2 and live.log_path in logs
    finally:
        adapter.unload(handle)


def test_durations_come_from_the_inputs_meta(
    checkout: FakeCheckout,
    adapter_and_handle: tuple[FlashTalkAdapter, FlashTalkHandle],
    job_inputs: Callable[..., JobInputs],
    ctx: RecordingContext,
) -> None:
    adapter, handle = adapter_and_handle
    inputs = job_inputs("soulx-flashtalk-14b", ft_params())
    inputs.meta = {"audio": {"duration_s": 1.0}}  # what the API measured; the file is not probed again
    out = adapter.run(handle, inputs, ctx)
    assert out.frames_generated == 25 == ctx.frame_count


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False
