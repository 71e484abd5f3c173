"""The OmniRT adapter against the stand-in ``python -m omnirt`` and a stand-in ``omnirt serve``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from jobservice.model_params import OmniRTAudioParams, OmniRTTextParams
from jobservice.placement import parse_devices
from tests.realmodels.conftest import RecordingContext, deployed_spec
from tests.standins.common import read_records
from tests.standins.deploy import ROOT, STANDINS
from tests.standins.servers import FakeOmniRTServer
from workers.adapters.base import AdapterError
from workers.adapters.omnirt import OmniRTAdapter


def params(**overrides: Any) -> dict[str, Any]:
    return OmniRTAudioParams.model_validate({"omnirt_model": "wav2lip", **overrides}).model_dump(mode="json")


@pytest.fixture
def cli(tmp_path: Path):  # type: ignore[no-untyped-def]
    record, mode = tmp_path / "omnirt.jsonl", tmp_path / "mode.txt"
    env = {
        "STANDIN_RECORD": str(record),
        "STANDIN_MODE_FILE": str(mode),
        "PYTHONPATH": f"{STANDINS / 'omnirt_pkg'}:{ROOT}",
    }
    entry = {
        "python": sys.executable,
        "models": ["wav2lip", "quicktalk"],
        "fps": {"wav2lip": 30},
        "env": env,
        "config": {"resolution": 256},
    }
    spec = deployed_spec(tmp_path, "omnirt", entry)
    adapter = OmniRTAdapter()
    return adapter, adapter.load(parse_devices("cuda:0"), spec.config), record, mode


def test_cli_result_becomes_an_expected_file_and_folds_the_report(
    cli, ctx: RecordingContext, job_inputs
) -> None:  # type: ignore[no-untyped-def]
    adapter, handle, record, _ = cli
    out = adapter.run(handle, job_inputs("omnirt", params(seed=3)), ctx)
    assert out.video_path is not None and out.video_path.exists()
    assert out.expected is not None and (out.expected.width, out.expected.fps, out.expected.num_frames) == (
        256,
        30.0,
        60,
    )
    assert out.expected.audio_path is not None
    (received,) = read_records(record)
    argv = received["argv"]
    assert argv[1:4] == ["generate", "--task", "audio2video"] and "--json" in argv
    assert argv[argv.index("--model") + 1] == "wav2lip" and argv[argv.index("--seed") + 1] == "3"
    assert received["config"] == {"resolution": 256}
    assert ctx.timings["omnirt_denoise_loop_ms"] == 840.0 and ctx.memory["omnirt_peak_mb"] == 3890.0
    assert ctx.extra["omnirt_report"]["model"] == "wav2lip" and ctx.cold_start is True


@pytest.mark.parametrize(
    ("mode", "code"),
    [
        ("request_error", "request_rejected"),
        ("budget", "insufficient_device_memory"),
        ("crash", "model_crashed"),
        ("oom", "out_of_memory"),
        ("lying", "output_missing"),
    ],
)
def test_cli_failures(cli, ctx, job_inputs, mode: str, code: str) -> None:  # type: ignore[no-untyped-def]
    adapter, handle, _, mode_file = cli
    mode_file.write_text(mode)
    with pytest.raises(AdapterError) as failure:
        adapter.run(handle, job_inputs("omnirt", params()), ctx)
    assert failure.value.code == code, failure.value.message


def test_cli_inline_artifact_is_decoded(cli, ctx, job_inputs) -> None:  # type: ignore[no-untyped-def]
    adapter, handle, _, mode_file = cli
    mode_file.write_text("inline")
    out = adapter.run(handle, job_inputs("omnirt", params()), ctx)
    assert (
        out.video_path is not None
        and out.video_path.name == "inline-output.mp4"
        and out.video_path.stat().st_size > 0
    )


@pytest.fixture
def server(tmp_path: Path):  # type: ignore[no-untyped-def]
    fake = FakeOmniRTServer(tmp_path / "server").start()
    yield fake
    fake.stop()


def test_server_async_job_with_a_shared_folder(tmp_path, server, ctx, job_inputs) -> None:  # type: ignore[no-untyped-def]
    shared = tmp_path / "shared"
    entry = {"mode": "server", "endpoint": server.url, "scratch_dir": str(shared), "api_key": "k"}
    spec = deployed_spec(tmp_path, "omnirt", entry)
    adapter = OmniRTAdapter()
    handle = adapter.load(parse_devices("cpu"), spec.config)
    out = adapter.run(handle, job_inputs("omnirt", params(omnirt_model="quicktalk", fps=25)), ctx)
    (body,) = server.requests
    assert body["model"] == "quicktalk" and body["async_run"] is True and body["task"] == "audio2video"
    assert body["inputs"]["audio"].startswith(str(shared)) and body["config"]["fps"] == 25
    assert out.video_path is not None and out.video_path.exists() and ctx.scratch in out.video_path.parents
    assert not (shared / "job-1").exists(), "the shared folder is cleaned after the job"
    assert ctx.timings["omnirt_denoise_loop_ms"] == 512.0 and ctx.cold_start is False


@pytest.mark.parametrize(("mode", "code"), [("reject", "request_rejected"), ("oom", "out_of_memory")])
def test_server_failures(tmp_path, server, ctx, job_inputs, mode: str, code: str) -> None:  # type: ignore[no-untyped-def]
    server.mode = mode
    spec = deployed_spec(tmp_path, "omnirt", {"mode": "server", "endpoint": server.url})
    adapter = OmniRTAdapter()
    handle = adapter.load(parse_devices("cpu"), spec.config)
    with pytest.raises(AdapterError) as failure:
        adapter.run(handle, job_inputs("omnirt", params()), ctx)
    assert failure.value.code == code


def test_the_deployment_config_wins_over_the_request_config(cli, ctx, job_inputs) -> None:  # type: ignore[no-untyped-def]
    adapter, handle, record, _ = cli
    request = params(config={"resolution": 1024, "sample_steps": 3})
    adapter.run(handle, job_inputs("omnirt", request), ctx)
    (received,) = read_records(record)
    assert received["config"] == {"resolution": 256, "sample_steps": 3}


@pytest.mark.parametrize(
    "key",
    ["repo_path", "python_executable", "env_script", "ascend_env_script", "launcher", "visible_devices"]
    + ["nproc_per_node", "device_map", "output_dir", "resident_target", "t5_quant_dir", "my_model_path"],
)
@pytest.mark.parametrize("schema", [OmniRTAudioParams, OmniRTTextParams])
def test_a_request_config_may_not_set_paths_launch_or_placement(schema: Any, key: str) -> None:
    with pytest.raises(ValidationError) as refused:
        schema.model_validate({"omnirt_model": "wav2lip", "prompt": "p", "config": {key: "/tmp/evil"}})
    assert f"'{key}'" in str(refused.value)


def test_a_request_config_may_come_as_json_text_from_a_form() -> None:
    parsed = OmniRTAudioParams.model_validate({"omnirt_model": "wav2lip", "config": '{"sample_steps": 3}'})
    assert parsed.config == {"sample_steps": 3}
    with pytest.raises(ValidationError):
        OmniRTAudioParams.model_validate({"omnirt_model": "wav2lip", "config": "[1, 2]"})


def test_a_forbidden_key_is_refused_by_the_adapter_too(cli, ctx, job_inputs) -> None:  # type: ignore[no-untyped-def]
    adapter, handle, record, _ = cli
    request = {**params(), "config": {"repo_path": "/tmp/evil"}}  # e.g. queued before validation refused it
    with pytest.raises(AdapterError) as refused:
        adapter.run(handle, job_inputs("omnirt", request), ctx)
    assert refused.value.code == "invalid_parameters" and "repo_path" in refused.value.message
    assert read_records(record) == []


def test_the_gate_expects_the_requested_size_not_omnirts_claim(cli, ctx, job_inputs) -> None:  # type: ignore[no-untyped-def]
    adapter, handle, _, _ = cli
    out = adapter.run(handle, job_inputs("omnirt", params(width=320, height=192)), ctx)
    assert out.expected is not None and (out.expected.width, out.expected.height) == (320, 192)
    assert out.extra["expected_from"]["width"] == "request"


def test_the_duration_comes_from_the_inputs_meta(cli, ctx, job_inputs) -> None:  # type: ignore[no-untyped-def]
    adapter, handle, _, _ = cli
    inputs = job_inputs("omnirt", params())
    inputs.meta = {"audio": {"duration_s": 1.5}}
    out = adapter.run(handle, inputs, ctx)
    assert out.media_duration_s == 1.5


def test_a_failed_server_job_leaves_the_shared_folder_clean(tmp_path, server, ctx, job_inputs) -> None:  # type: ignore[no-untyped-def]
    server.mode = "oom"
    shared = tmp_path / "shared"
    entry = {"mode": "server", "endpoint": server.url, "scratch_dir": str(shared)}
    spec = deployed_spec(tmp_path, "omnirt", entry)
    adapter = OmniRTAdapter()
    handle = adapter.load(parse_devices("cpu"), spec.config)
    with pytest.raises(AdapterError):
        adapter.run(handle, job_inputs("omnirt", params()), ctx)
    assert not (shared / "job-1").exists()
