"""The OmniRT adapter, called directly: the request it builds, the config allow-list, output
confinement, and what only the stand-in ``python -m omnirt`` can act out (OmniRT's memory budget
refusing a run, an artifact outside the output folder, an inline artifact). The real package, in
both modes, through real workers: tests/integration/test_omnirt_real.py; here a real
``omnirt serve`` checks the shared-folder set-up."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from jobservice.families.omnirt import OmniRTAudioParams, OmniRTTextParams
from jobservice.fleet.placement import parse_devices
from tests.fakes.context import RecordingContext
from tests.realmodels.conftest import deployed_spec
from tests.standins.common import read_records
from tests.standins.deploy import ROOT, STANDINS, flashhead_checkout
from tests.standins.omnirt_real import OmniRTServe, ensure_venv
from workers.adapters.base import AdapterError, JobInputs
from workers.adapters.omnirt.adapter import OmniRTAdapter, OmniRTHandle
from workers.adapters.omnirt.request import public_report

MODEL = "soulx-flashhead-1.3b"
FAKE_PATH = f"{STANDINS / 'omnirt_pkg'}:{ROOT}"

# The ``cli`` fixture: the adapter, its handle, the stand-in's record file and its mode file.
OmniRTCli = tuple[OmniRTAdapter, OmniRTHandle, Path, Path]


def params(**overrides: Any) -> dict[str, Any]:
    return OmniRTAudioParams.model_validate({"omnirt_model": MODEL, **overrides}).model_dump(mode="json")


@pytest.fixture
def cli(tmp_path: Path) -> OmniRTCli:
    record, mode = tmp_path / "omnirt.jsonl", tmp_path / "mode.txt"
    env = {"STANDIN_RECORD": str(record), "STANDIN_MODE_FILE": str(mode), "PYTHONPATH": FAKE_PATH}
    entry = {
        "python": sys.executable,
        "omnirt_backend": "cpu-stub",
        "models": [MODEL],
        "fps": {MODEL: 25},
        "env": env,
        "config": {"repo_path": "/opt/SoulX-FlashHead", "sample_steps": 2},
    }
    spec = deployed_spec(tmp_path, "omnirt", entry)
    adapter = OmniRTAdapter()
    return adapter, adapter.load(parse_devices("cpu"), spec.config), record, mode


def test_cli_sends_one_whole_request_file(
    cli: OmniRTCli, ctx: RecordingContext, job_inputs: Callable[..., JobInputs]
) -> None:
    adapter, handle, record, _ = cli
    request = params(seed=3, config={"model_type": "lite", "sample_steps": 4})
    out = adapter.run(handle, job_inputs("omnirt", request), ctx)
    (received,) = read_records(record)
    argv = received["argv"]
    assert argv[1:] == ["generate", "--config", str(ctx.scratch / "omnirt" / "request.json"), "--json"]
    sent = received["request"]
    assert (sent["task"], sent["model"], sent["backend"]) == ("audio2video", MODEL, "cpu-stub")
    assert set(sent["inputs"]) == {"image", "audio"} and all(
        Path(p).is_absolute() for p in sent["inputs"].values()
    )
    # Our parameters, then the request's config, then the deployment's (which wins), then output_dir.
    assert sent["config"] == {
        "seed": 3,
        "model_type": "lite",
        "sample_steps": 2,
        "repo_path": "/opt/SoulX-FlashHead",
        "output_dir": str((ctx.scratch / "omnirt" / "out").resolve()),
    }
    assert out.video_path is not None and out.expected is not None
    assert (out.expected.width, out.expected.fps, out.expected.num_frames) == (512, 25.0, 50)
    assert ctx.timings["omnirt_denoise_loop_ms"] == 840.0 and ctx.memory["omnirt_peak_mb"] == 3890.0
    assert ctx.extra["omnirt_run_id"] == ctx.extra["omnirt_report"]["run_id"] and ctx.cold_start is True
    assert ctx.extra["omnirt_request"]["config"] == {"model_type": "lite", "sample_steps": 4}
    assert "repo_path" not in ctx.extra["omnirt_report"]["config_resolved"]


def test_the_stand_in_refuses_a_config_file_without_task_as_omnirt_does(tmp_path: Path) -> None:
    request = tmp_path / "config.json"
    request.write_text(json.dumps({"repo_path": "/opt/SoulX-FlashHead"}))  # config keys, not a request
    argv = [sys.executable, "-m", "omnirt", "generate", "--task", "audio2video", "--model", MODEL]
    done = subprocess.run(
        [*argv, "--config", str(request), "--json"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": FAKE_PATH, "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 1 and "KeyError: 'task'" in done.stderr and done.stdout == ""


@pytest.mark.parametrize(
    ("mode", "code"), [("budget", "insufficient_device_memory"), ("outside", "output_invalid")]
)
def test_cli_failures_only_the_stand_in_can_act_out(
    cli: OmniRTCli, ctx: RecordingContext, job_inputs: Callable[..., JobInputs], mode: str, code: str
) -> None:
    adapter, handle, _, mode_file = cli
    mode_file.write_text(mode)
    with pytest.raises(AdapterError) as failure:
        adapter.run(handle, job_inputs("omnirt", params()), ctx)
    assert failure.value.code == code, failure.value.message


def test_cli_inline_artifact_is_decoded_into_the_output_folder(
    cli: OmniRTCli, ctx: RecordingContext, job_inputs: Callable[..., JobInputs]
) -> None:
    adapter, handle, _, mode_file = cli
    mode_file.write_text("inline")
    out = adapter.run(handle, job_inputs("omnirt", params()), ctx)
    assert out.video_path == (ctx.scratch / "omnirt" / "out" / "inline-output.mp4").resolve()
    assert out.video_path.stat().st_size > 0


@pytest.mark.parametrize(
    "key",
    ["repo_path", "python_executable", "env_script", "ascend_env_script", "launcher", "visible_devices"]
    + ["nproc_per_node", "device_map", "output_dir", "resident_target", "t5_quant_dir", "my_model_path"]
    + ["worker_script", "extra_env", "hf_endpoint", "server_url", "device", "profile"],
)
@pytest.mark.parametrize("schema", [OmniRTAudioParams, OmniRTTextParams])
def test_a_request_config_may_set_only_allow_listed_keys(schema: Any, key: str) -> None:
    with pytest.raises(ValidationError) as refused:
        schema.model_validate({"omnirt_model": MODEL, "prompt": "p", "config": {key: "/tmp/evil"}})
    assert f"'{key}'" in str(refused.value) and "sample_steps" in str(refused.value)


def test_an_allow_listed_key_takes_plain_values_only() -> None:
    ok = OmniRTAudioParams.model_validate({"omnirt_model": MODEL, "config": {"sample_steps": 3}})
    assert ok.config == {"sample_steps": 3}
    with pytest.raises(ValidationError):
        OmniRTAudioParams.model_validate({"omnirt_model": MODEL, "config": {"seed": {"repo_path": "/x"}}})


def test_a_request_config_may_come_as_json_text_from_a_form() -> None:
    parsed = OmniRTAudioParams.model_validate({"omnirt_model": MODEL, "config": '{"sample_steps": 3}'})
    assert parsed.config == {"sample_steps": 3}
    with pytest.raises(ValidationError):
        OmniRTAudioParams.model_validate({"omnirt_model": MODEL, "config": "[1, 2]"})


def test_a_refused_key_is_refused_by_the_adapter_too(
    cli: OmniRTCli, ctx: RecordingContext, job_inputs: Callable[..., JobInputs]
) -> None:
    adapter, handle, record, _ = cli
    request = {**params(), "config": {"repo_path": "/tmp/evil"}}  # e.g. queued before validation refused it
    with pytest.raises(AdapterError) as refused:
        adapter.run(handle, job_inputs("omnirt", request), ctx)
    assert refused.value.code == "invalid_parameters" and "repo_path" in refused.value.message
    assert read_records(record) == []


def test_a_deployment_config_may_not_choose_the_output_folder(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="output_dir"):
        deployed_spec(
            tmp_path,
            "omnirt",
            {"python": sys.executable, "models": [MODEL], "config": {"output_dir": "/srv"}},
        )


def test_the_gate_expects_the_requested_size_not_omnirts_claim(
    cli: OmniRTCli, ctx: RecordingContext, job_inputs: Callable[..., JobInputs]
) -> None:
    adapter, handle, _, _ = cli
    out = adapter.run(handle, job_inputs("omnirt", params(width=320, height=192)), ctx)
    assert out.expected is not None and (out.expected.width, out.expected.height) == (320, 192)
    assert out.extra["expected_from"]["width"] == "request"


def test_the_duration_comes_from_the_inputs_meta(
    cli: OmniRTCli, ctx: RecordingContext, job_inputs: Callable[..., JobInputs]
) -> None:
    adapter, handle, _, _ = cli
    inputs = job_inputs("omnirt", params())
    inputs.meta = {"audio": {"duration_s": 1.5}}
    out = adapter.run(handle, inputs, ctx)
    assert out.media_duration_s == 1.5


def test_the_kept_report_drops_the_deployments_paths() -> None:
    kept = public_report({"run_id": "r", "config_resolved": {"repo_path": "/opt/x", "sample_steps": 2}})
    assert kept == {"run_id": "r", "config_resolved": {"sample_steps": 2}}


@pytest.fixture(scope="module")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OmniRTServe, Any]]:
    tmp = tmp_path_factory.mktemp("omnirt-serve")
    checkout = flashhead_checkout(tmp / "fh")
    server = OmniRTServe(ensure_venv(), tmp / "serve", checkout.env()).start()
    yield server, checkout
    server.stop()


def test_server_mode_through_a_shared_folder_and_a_path_map(
    tmp_path: Path,
    real_server: tuple[OmniRTServe, Any],
    ctx: RecordingContext,
    job_inputs: Callable[..., JobInputs],
) -> None:
    server, checkout = real_server
    shared, seen_as = tmp_path / "shared", tmp_path / "seen-by-omnirt"
    shared.mkdir()
    seen_as.symlink_to(shared.resolve(), target_is_directory=True)
    entry = {
        "mode": "server",
        "endpoint": server.url,
        "omnirt_backend": "cpu-stub",
        "models": [MODEL],
        "scratch_dir": str(shared),
        "path_map": {str(shared.resolve()): str(seen_as)},  # the server sees the folder elsewhere
        "config": {"repo_path": str(checkout.repo), "python_executable": sys.executable, "launcher": "python"}
        | {"ckpt_dir": str(checkout.ckpt_dir), "wav2vec_dir": str(checkout.wav2vec_dir)},
    }
    spec = deployed_spec(tmp_path, "omnirt", entry)
    adapter = OmniRTAdapter()
    out = adapter.run(adapter.load(parse_devices("cpu"), spec.config), job_inputs("omnirt", params()), ctx)
    record = server.job(ctx.extra["omnirt_job_id"])
    sent = record["request"]
    assert isinstance(sent, dict) and sent["inputs"]["audio"].startswith(str(seen_as))
    assert sent["config"]["output_dir"] == str(seen_as / "job-1" / "out")
    assert out.video_path is not None and out.video_path.exists() and ctx.scratch in out.video_path.parents
    assert not (shared / "job-1").exists(), "the shared folder is cleaned after the job"
    assert ctx.timings["omnirt_denoise_loop_ms"] > 0 and ctx.cold_start is False


def test_the_manuals_omnirt_entries_load(tmp_path: Path) -> None:
    from jobservice.families.deployment import load_deployment

    text = (ROOT / "docs" / "models.md").read_text().split("\n## OmniRT\n", 1)[1]
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "deploy.yaml"
    path.write_text(block)
    specs = {s.id: s for s in load_deployment(path).specs()}
    assert specs["omnirt"].config["mode"] == "cli" and specs["omnirt-serve"].config["mode"] == "server"
    assert specs["omnirt"].config["config"]["repo_path"] == "/opt/SoulX-FlashHead"
