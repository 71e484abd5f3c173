"""OmniRT through a REAL worker, for what the real package (tests/integration/test_omnirt_real.py)
cannot be made to do here: OmniRT's memory budget refusing a run (exit 2), acted out by the
stand-in ``python -m omnirt``; and the API's checks of OmniRT requests, which need no OmniRT."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.conftest import Stack, build_stack
from tests.standins.common import read_records
from tests.standins.deploy import ROOT, STANDINS, write_deployment
from tests.standins.jobs import post_a2v, speech_clip, submit_a2v

pytestmark = [pytest.mark.integration, pytest.mark.slow]
MODEL = "soulx-flashhead-1.3b"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("omnirt")
    record, mode = tmp / "omnirt.jsonl", tmp / "mode.txt"
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
                    "models": [MODEL],
                    "fps": {MODEL: 25},
                    "env": env,
                    "config": {"repo_path": "/opt/SoulX-FlashHead"},
                },
            },
            "workers": [{"devices": "cuda:0", "models": ["omnirt"]}],
        },
    )
    stack = build_stack(tmp / "stack", deployment_file=deployment)
    stack.start_worker("omni", devices="cuda:0")
    yield {"stack": stack, "record": record, "mode": mode, "speech": speech_clip(tmp)}
    stack.close()


def test_omnirts_memory_budget_refusal_is_a_clear_job_error(site: dict[str, Any]) -> None:
    stack: Stack = site["stack"]
    site["mode"].write_text("budget")
    try:
        job = stack.wait(submit_a2v(stack, "omnirt", site["speech"], omnirt_model=MODEL), timeout=60)
    finally:
        site["mode"].write_text("ok")
    assert job.status == "failed" and job.error_code == "insufficient_device_memory", job.error_message
    received = read_records(site["record"])[-1]
    assert received["request"]["task"] == "audio2video" and received["request"]["model"] == MODEL
    assert (
        received["env"]["CUDA_VISIBLE_DEVICES"] == "0" and received["env"]["ASCEND_RT_VISIBLE_DEVICES"] == ""
    )


def test_the_catalog_offers_only_the_configured_omnirt_models(site: dict[str, Any]) -> None:
    stack: Stack = site["stack"]
    answer = post_a2v(stack, "omnirt", site["speech"], omnirt_model="musetalk")
    assert answer.status_code == 422 and answer.get_json()["error"]["code"] == "invalid_parameters"
    assert "omnirt_model" in answer.get_json()["error"]["message"]


def test_a_request_config_may_set_only_sampling_keys(site: dict[str, Any]) -> None:
    stack: Stack = site["stack"]
    before = len(read_records(site["record"]))
    config = '{"python_executable": "/bin/sh", "sample_steps": 2}'
    answer = post_a2v(stack, "omnirt", site["speech"], omnirt_model=MODEL, config=config)
    assert answer.status_code == 422, answer.get_data(as_text=True)
    error = answer.get_json()["error"]
    assert error["code"] == "invalid_parameters" and "'python_executable'" in error["message"]
    assert len(read_records(site["record"])) == before
