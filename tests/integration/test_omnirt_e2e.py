"""OmniRT through a REAL worker: the stand-in ``python -m omnirt generate --json`` (wav2lip and
quicktalk, the OpenTalking family) and a stand-in ``omnirt serve``; OmniRT's report folded into ours."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Stack, build_stack
from tests.standins.common import read_records
from tests.standins.deploy import ROOT, STANDINS, write_deployment
from tests.standins.jobs import check, post_a2v, report, speech_clip, submit_a2v
from tests.standins.servers import FakeOmniRTServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("omnirt")
    record, mode = tmp / "omnirt.jsonl", tmp / "mode.txt"
    server = FakeOmniRTServer(tmp / "server").start()
    env = {
        "STANDIN_RECORD": str(record),
        "STANDIN_MODE_FILE": str(mode),
        "PYTHONPATH": f"{STANDINS / 'omnirt_pkg'}:{ROOT}",
    }
    deployment = write_deployment(
        tmp / "deploy.yaml",
        {
            "reference_models": False,
            "models": {
                "omnirt": {
                    "python": sys.executable,
                    "models": ["wav2lip", "quicktalk"],
                    "fps": {"wav2lip": 30},
                    "env": env,
                },
                "omnirt-serve": {
                    "backend": "omnirt",
                    "mode": "server",
                    "endpoint": server.url,
                    "scratch_dir": str(tmp / "shared"),
                },
            },
            "workers": [{"devices": "cuda:0", "models": ["omnirt", "omnirt-serve"]}],
        },
    )
    stack = build_stack(tmp / "stack", deployment_file=deployment)
    stack.start_worker("omni", devices="cuda:0")
    yield {"stack": stack, "record": record, "mode": mode, "server": server, "speech": speech_clip(tmp)}
    stack.close()
    server.stop()


@pytest.fixture
def omni(site: dict[str, Any]) -> Iterator[dict[str, Any]]:
    site["mode"].write_text("ok")
    yield site
    site["mode"].write_text("ok")


def test_cli_job_passes_the_gate_with_omnirts_report_folded_in(omni: dict[str, Any]) -> None:
    stack: Stack = omni["stack"]
    job = stack.wait(submit_a2v(stack, "omnirt", omni["speech"], omnirt_model="wav2lip", seed=9), timeout=60)
    assert job.status == "succeeded", (job.error_code, job.error_message)
    received = read_records(omni["record"])[-1]
    argv = received["argv"]
    assert argv[argv.index("--model") + 1] == "wav2lip" and "--json" in argv and "--audio" in argv
    assert (
        received["env"]["CUDA_VISIBLE_DEVICES"] == "0" and received["env"]["ASCEND_RT_VISIBLE_DEVICES"] == ""
    )
    data = report(stack, str(job.id))
    assert check(data, "fps")["expected"] == 30.0 and check(data, "duration")["passed"]
    assert data["timings"]["omnirt_denoise_loop_ms"] == 840.0 and data["memory"]["omnirt_peak_mb"] == 3890.0
    assert data["extra"]["omnirt_report"]["schema_version"] == "1.0.0"


def test_the_catalog_offers_only_the_configured_omnirt_models(omni: dict[str, Any]) -> None:
    stack: Stack = omni["stack"]
    answer = post_a2v(stack, "omnirt", omni["speech"], omnirt_model="musetalk")
    assert answer.status_code == 422 and answer.get_json()["error"]["code"] == "invalid_parameters"
    assert "omnirt_model" in answer.get_json()["error"]["message"]


@pytest.mark.parametrize(
    ("mode", "code"), [("request_error", "request_rejected"), ("crash", "model_crashed")]
)
def test_cli_exit_codes(omni: dict[str, Any], mode: str, code: str) -> None:
    stack: Stack = omni["stack"]
    omni["mode"].write_text(mode)
    job = stack.wait(submit_a2v(stack, "omnirt", omni["speech"], omnirt_model="quicktalk"), timeout=60)
    assert job.status == "failed" and job.error_code == code, job.error_message


def test_a_running_omnirt_serve(omni: dict[str, Any]) -> None:
    stack: Stack = omni["stack"]
    job = stack.wait(
        submit_a2v(stack, "omnirt-serve", omni["speech"], omnirt_model="quicktalk", fps=25), timeout=60
    )
    assert job.status == "succeeded", (job.error_code, job.error_message)
    body = omni["server"].requests[-1]
    assert body["async_run"] is True and body["inputs"]["audio"].startswith(
        str(Path(omni["server"].folder).parent / "shared")
    )
    data = report(stack, str(job.id))
    assert data["execution_mode"] == "http" and data["timings"]["omnirt_denoise_loop_ms"] == 512.0


def test_a_request_config_cannot_set_deployment_keys(omni: dict[str, Any]) -> None:
    stack: Stack = omni["stack"]
    before = len(read_records(omni["record"]))
    config = '{"python_executable": "/bin/sh", "sample_steps": 2}'
    answer = post_a2v(stack, "omnirt", omni["speech"], omnirt_model="wav2lip", config=config)
    assert answer.status_code == 422, answer.get_data(as_text=True)
    error = answer.get_json()["error"]
    assert error["code"] == "invalid_parameters" and "'python_executable'" in error["message"]
    assert len(read_records(omni["record"])) == before


def test_a_request_config_reaches_omnirt_under_the_deployments(omni: dict[str, Any]) -> None:
    stack: Stack = omni["stack"]
    job_id = submit_a2v(stack, "omnirt", omni["speech"], omnirt_model="wav2lip", config='{"sample_steps": 2}')
    job = stack.wait(job_id, timeout=60)
    assert job.status == "succeeded", (job.error_code, job.error_message)
    assert read_records(omni["record"])[-1]["config"] == {"sample_steps": 2}


def test_a_wrong_size_output_fails_the_gate(omni: dict[str, Any]) -> None:
    stack: Stack = omni["stack"]
    # The stand-in, like a model that ignores --width/--height, writes 256x256 and says so.
    job_id = submit_a2v(stack, "omnirt", omni["speech"], omnirt_model="wav2lip", width=320, height=192)
    job = stack.wait(job_id, timeout=60)
    assert job.status == "failed" and job.error_code == "validation_failed", job.error_message
    data = report(stack, str(job.id))
    assert check(data, "width")["expected"] == 320 and not check(data, "width")["passed"]
