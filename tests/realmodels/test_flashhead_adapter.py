"""The FlashHead adapter against the stand-in generate_video.py, in this process (no worker)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jobservice.fleet.placement import parse_devices
from tests.fakes.context import RecordingContext
from tests.realmodels.conftest import deployed_spec, fh_params
from tests.standins.deploy import FakeCheckout, flashhead_checkout
from workers.adapters.base import AdapterError, JobCanceled, JobInputs
from workers.adapters.processes.memory import CardMemory
from workers.adapters.soulx.flashhead import FlashHeadAdapter, FlashHeadHandle


@pytest.fixture
def checkout(tmp_path: Path) -> FakeCheckout:
    return flashhead_checkout(tmp_path / "site")


def loaded(
    tmp_path: Path,
    checkout: FakeCheckout,
    devices: str = "npu:2,3",
    adapter: FlashHeadAdapter | None = None,
    **entry: Any,
) -> tuple[FlashHeadAdapter, FlashHeadHandle]:
    spec = deployed_spec(tmp_path, "soulx-flashhead-1.3b", checkout.script_entry(**entry))
    adapter = adapter or FlashHeadAdapter(memory_reader=lambda device: None)
    return adapter, adapter.load(parse_devices(devices), spec.config)


def test_torchrun_over_the_card_group_with_the_quality_profile(
    tmp_path: Path, checkout: FakeCheckout, ctx: RecordingContext, job_inputs: Callable[..., JobInputs]
) -> None:
    adapter, handle = loaded(tmp_path, checkout)
    out = adapter.run(handle, job_inputs("soulx-flashhead-1.3b", fh_params(seed=7)), ctx)
    assert out.video_path is not None and out.video_path.stat().st_size > 0
    assert out.expected is not None and (out.expected.width, out.expected.height, out.expected.fps) == (
        512,
        512,
        25.0,
    )
    assert out.expected.num_frames == 50 and ctx.cold_start is True
    (torchrun,) = checkout.records("torchrun")
    assert torchrun["nproc"] == 2 and torchrun["argv"][1:3] == ["--nproc-per-node", "2"]
    ranks = sorted(checkout.records("generate_video.py"), key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1]
    for rank in ranks:
        env = rank["env"]
        assert env["ASCEND_RT_VISIBLE_DEVICES"] == "2,3" and env["CUDA_VISIBLE_DEVICES"] == ""
        assert env["WORLD_SIZE"] == "2" and env["FAKE_ASCEND_ENV"] == "1"
        assert env["FLASHHEAD_SAMPLE_STEPS"] == "2" and env["FLASHHEAD_VAE_2D_SPLIT"] == "1"
        assert env["FLASHHEAD_LATENT_CARRY"] == "0" and env["FLASHHEAD_NPU_FUSION_ATTENTION"] == "1"
        assert rank["cwd"] == str(checkout.repo)
    argv = ranks[0]["argv"]
    flags = dict(zip(argv[1::2], argv[2::2], strict=False))
    assert flags["--model_type"] == "pro" and flags["--audio_encode_mode"] == "stream"
    assert flags["--base_seed"] == "7" and flags["--ckpt_dir"] == str(checkout.ckpt_dir)
    assert flags["--save_file"].endswith("res_output.mp4")
    assert "Generate video chunk-1 done" in ctx.log_text()
    assert ctx.fractions[-1] == 1.0


def test_python_launcher_on_one_card_and_job_parameters_become_variables(
    tmp_path: Path, checkout: FakeCheckout, ctx: RecordingContext, job_inputs: Callable[..., JobInputs]
) -> None:
    adapter, handle = loaded(tmp_path, checkout, devices="cuda:1", ascend_env_script=None)
    params = fh_params(sample_steps=4, latent_carry=True, vae_2d_split=False, model_type="lite")
    adapter.run(handle, job_inputs("soulx-flashhead-1.3b", params), ctx)
    assert checkout.records("torchrun") == []
    (rank,) = checkout.records("generate_video.py")
    env = rank["env"]
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and "FAKE_ASCEND_ENV" not in env
    assert (env["FLASHHEAD_SAMPLE_STEPS"], env["FLASHHEAD_LATENT_CARRY"], env["FLASHHEAD_VAE_2D_SPLIT"]) == (
        "4",
        "1",
        "0",
    )
    assert "--model_type" in rank["argv"] and rank["argv"][rank["argv"].index("--model_type") + 1] == "lite"


@pytest.mark.parametrize(
    ("mode", "code", "words"),
    [
        ("exit1", "model_crashed", "bad checkpoint shard"),
        ("missing", "output_missing", "wrote no res_output.mp4"),
        ("empty", "output_empty", "empty"),
        ("oom", "out_of_memory", "NPU out of memory"),
    ],
)
def test_failures_become_clear_errors(
    tmp_path: Path,
    checkout: FakeCheckout,
    ctx: RecordingContext,
    job_inputs: Callable[..., JobInputs],
    mode: str,
    code: str,
    words: str,
) -> None:
    adapter, handle = loaded(tmp_path, checkout)
    checkout.set_mode(mode)
    with pytest.raises(AdapterError) as failure:
        adapter.run(handle, job_inputs("soulx-flashhead-1.3b", fh_params()), ctx)
    assert failure.value.code == code and words in failure.value.message


def test_cancel_kills_the_whole_process_group(
    tmp_path: Path, checkout: FakeCheckout, job_inputs: Callable[..., JobInputs], ctx: RecordingContext
) -> None:
    adapter, handle = loaded(tmp_path, checkout)
    checkout.set_mode("hang")
    ctx.cancel_when = lambda c: len(checkout.records("generate_video.py")) == 2
    started = time.monotonic()
    with pytest.raises(JobCanceled):
        adapter.run(handle, job_inputs("soulx-flashhead-1.3b", fh_params()), ctx)
    assert time.monotonic() - started < 15
    pids = [r["pid"] for r in checkout.records()]
    assert len(pids) == 3  # torchrun and both ranks
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids), "torchrun or a rank survived the cancel"


def test_budget_refuses_before_launching(
    tmp_path: Path, checkout: FakeCheckout, ctx: RecordingContext, job_inputs: Callable[..., JobInputs]
) -> None:
    cards = [CardMemory("npu", 2, free_mb=20 * 1024), CardMemory("npu", 3, free_mb=12 * 1024)]
    adapter = FlashHeadAdapter(memory_reader=lambda device: cards)
    adapter, handle = loaded(tmp_path, checkout, adapter=adapter)
    with pytest.raises(AdapterError) as failure:
        adapter.run(handle, job_inputs("soulx-flashhead-1.3b", fh_params()), ctx)
    assert failure.value.code == "insufficient_device_memory"
    assert "48 GB in total" in failure.value.message and "npu:3 12.0 GB" in failure.value.message
    assert checkout.records() == [], "nothing may start when the cards cannot hold the model"


def test_budget_passes_with_enough_memory(
    tmp_path: Path, checkout: FakeCheckout, ctx: RecordingContext, job_inputs: Callable[..., JobInputs]
) -> None:
    cards = [
        CardMemory("npu", 2, free_mb=30 * 1024, source="fake"),
        CardMemory("npu", 3, free_mb=30 * 1024, source="fake"),
    ]
    adapter, handle = loaded(tmp_path, checkout, adapter=FlashHeadAdapter(memory_reader=lambda device: cards))
    adapter.run(handle, job_inputs("soulx-flashhead-1.3b", fh_params()), ctx)
    assert (
        ctx.extra["memory_budget"]["checked"] is True
        and ctx.extra["memory_budget"]["free_gb"]["npu:3"] == 30.0
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours is dead for our purposes
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False


def test_the_expected_length_comes_from_the_inputs_meta(
    tmp_path: Path, checkout: FakeCheckout, ctx: RecordingContext, job_inputs: Callable[..., JobInputs]
) -> None:
    adapter, handle = loaded(tmp_path, checkout)
    inputs = job_inputs("soulx-flashhead-1.3b", fh_params())
    inputs.meta = {"audio": {"duration_s": 1.0}}  # what the API measured; the file is not probed again
    out = adapter.run(handle, inputs, ctx)
    assert out.expected is not None and out.expected.num_frames == 25 == out.frames_generated


def test_once_mode_expects_the_shorter_video_upstreams_script_makes(
    tmp_path: Path, checkout: FakeCheckout, ctx: RecordingContext, job_inputs: Callable[..., JobInputs]
) -> None:
    # generate_video.py in "once" mode pads 2 s of speech to 33 + 28 frames of embedding, then
    # makes one chunk of 33 frames: the video lasts 1.32 s, not the speech's 2 s.
    adapter, handle = loaded(tmp_path, checkout, devices="npu:2")
    out = adapter.run(handle, job_inputs("soulx-flashhead-1.3b", fh_params(audio_encode_mode="once")), ctx)
    assert out.expected is not None and out.expected.num_frames == 33 == out.frames_generated
    assert out.expected.expected_duration_s == pytest.approx(1.32)
    assert out.video_path is not None and _frames_in(out.video_path) == 33


def test_once_mode_refuses_speech_too_short_for_a_chunk(
    tmp_path: Path, checkout: FakeCheckout, ctx: RecordingContext, job_inputs: Callable[..., JobInputs]
) -> None:
    adapter, handle = loaded(tmp_path, checkout, devices="npu:2")
    inputs = job_inputs("soulx-flashhead-1.3b", fh_params(audio_encode_mode="once"))
    inputs.meta = {"audio": {"duration_s": 1.2}}
    with pytest.raises(AdapterError) as failure:
        adapter.run(handle, inputs, ctx)
    assert failure.value.code == "input_too_short" and checkout.records() == []


def _frames_in(path: Path) -> int:
    import subprocess

    out = subprocess.run(
        ["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0"]
        + ["-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(out.strip())
