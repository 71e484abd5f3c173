"""OmniRT for real: the omnirt 0.1.0 package (its own venv, tests/standins/omnirt_real.py) runs the
script-backed ``soulx-flashhead-1.3b`` on its ``cpu-stub`` backend, pointed by the deployment's
``config`` at a FlashHead checkout whose ``generate_video.py`` is the stand-in. Real worker
processes, in CLI mode (``omnirt generate --config request.json --json``) and against a real
``omnirt serve``; nothing of OmniRT is patched but the cpu-stub denoise guard."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Stack, build_stack
from tests.standins.deploy import ROOT, FakeCheckout, flashhead_checkout, write_deployment
from tests.standins.jobs import check, gone, job_log, report, speech_clip, submit_a2v
from tests.standins.omnirt_real import GUARD_FILE, VERSION, OmniRTServe, ensure_venv, modified_files

pytestmark = [pytest.mark.integration, pytest.mark.slow]
MODEL = "soulx-flashhead-1.3b"


def entry(checkout: FakeCheckout, python: Path, **extra: Any) -> dict[str, Any]:
    """The deployment entry the manual shows (docs/models.md, OmniRT), for this checkout."""
    return {
        "backend": "omnirt",
        "python": str(python),
        "omnirt_backend": "cpu-stub",
        "models": [MODEL],
        "defaults": {"omnirt_model": MODEL},
        "fps": {MODEL: 25},
        "validation": {"frame_tolerance": 4, "duration_tolerance_seconds": 0.2},  # FlashHead's slices
        "config": {
            "repo_path": str(checkout.repo),
            "ckpt_dir": "models/SoulX-FlashHead-1_3B",  # OmniRT resolves these against repo_path
            "wav2vec_dir": "models/wav2vec2-base-960h",
            "python_executable": sys.executable,
            "launcher": "python",
        },
        "env": checkout.env(),
        **extra,
    }


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("omnirt-real")
    python = ensure_venv()  # raises (the tests fail, never skip) when it cannot be built
    checkout = flashhead_checkout(tmp / "fh")
    server = OmniRTServe(python, tmp / "serve", checkout.env()).start()
    serve = {"mode": "server", "endpoint": server.url, "cancel_grace": 1}
    models = {
        "omnirt": entry(checkout, python),
        "omnirt-short": entry(checkout, python, timeout=4),
        "omnirt-serve": entry(checkout, python, **serve),
        "omnirt-serve-short": entry(checkout, python, timeout=4, **serve),
    }
    deployment = write_deployment(
        tmp / "deploy.yaml",
        {
            "reference_models": False,
            "models": models,
            "workers": [{"devices": "cpu", "models": list(models)}],
        },
    )
    stack = build_stack(tmp / "stack", deployment_file=deployment)
    stack.start_worker("omni", devices="cpu")
    yield {"stack": stack, "checkout": checkout, "server": server, "speech": speech_clip(tmp)}
    stack.close()
    server.stop()


@pytest.fixture
def omni(site: dict[str, Any]) -> Iterator[dict[str, Any]]:
    site["checkout"].set_mode("ok")
    site["checkout"].record.unlink(missing_ok=True)
    yield site
    site["checkout"].set_mode("ok")


def _timings(data: dict[str, Any]) -> dict[str, float]:
    return {k: round(v, 1) for k, v in data["timings"].items() if isinstance(v, int | float)}


def _assert_folded(data: dict[str, Any], checkout: FakeCheckout) -> None:
    omnirt = data["extra"]["omnirt_report"]
    assert data["timings"]["omnirt_denoise_loop_ms"] == pytest.approx(omnirt["timings"]["denoise_loop_ms"])
    assert data["timings"]["omnirt_export_ms"] == pytest.approx(omnirt["timings"]["export_ms"])
    assert data["extra"]["omnirt_run_id"] == omnirt["run_id"] and omnirt["model"] == MODEL
    assert omnirt["backend"] == "cpu-stub" and omnirt["execution_mode"] == "persistent_worker"
    assert "repo_path" not in omnirt["config_resolved"], "the deployment's paths are not published"
    assert check(data, "fps")["expected"] == 25.0 and check(data, "duration")["passed"]
    (script,) = checkout.records("generate_video.py")
    argv = script["argv"]
    assert argv[argv.index("--ckpt_dir") + 1] == str(checkout.ckpt_dir)
    assert argv[argv.index("--model_type") + 1] == "pro" and script["env"]["FLASHHEAD_SAMPLE_STEPS"] == "2"


def test_cli_job_runs_the_real_omnirt_with_a_whole_request_file(omni: dict[str, Any]) -> None:
    stack: Stack = omni["stack"]
    job = stack.wait(submit_a2v(stack, "omnirt", omni["speech"], seed=9), timeout=90)
    assert job.status == "succeeded", (job.error_code, job.error_message, job_log(stack, str(job.id)))
    data = report(stack, str(job.id))
    _assert_folded(data, omni["checkout"])
    assert data["execution_mode"] == "subprocess" and data["cold_start"] is True
    log = job_log(stack, str(job.id))
    assert "omnirt stdout (exit 0)" in log and '"event": "stage.end"' in log, "OmniRT's own events"
    assert not (ROOT / "omnirt.log").exists(), "OmniRT writes its events in the job's folder"
    print(f"\nCLI job {job.id}: ours {_timings(data)}; OmniRT {data['extra']['omnirt_report']['timings']}")


def test_server_job_runs_on_a_real_omnirt_serve(omni: dict[str, Any]) -> None:
    stack: Stack = omni["stack"]
    job = stack.wait(submit_a2v(stack, "omnirt-serve", omni["speech"], seed=9), timeout=90)
    assert job.status == "succeeded", (job.error_code, job.error_message, job_log(stack, str(job.id)))
    data = report(stack, str(job.id))
    _assert_folded(data, omni["checkout"])
    assert data["execution_mode"] == "http" and data["cold_start"] is False
    record = omni["server"].job(data["extra"]["omnirt_job_id"])
    assert record["state"] == "succeeded"
    assert record["request"]["config"]["seed"] == 9 and record["request"]["task"] == "audio2video"
    print(f"\nserver job {job.id}: ours {_timings(data)}; OmniRT {data['extra']['omnirt_report']['timings']}")


@pytest.mark.parametrize("model", ["omnirt", "omnirt-serve"])
def test_omnirt_refuses_a_key_the_model_does_not_take(omni: dict[str, Any], model: str) -> None:
    stack: Stack = omni["stack"]
    # `fps` is one of our parameters, but FlashHead's supported_config has no fps: OmniRT's own
    # validation refuses it (CLI: exit 2; server: 400), and the job says so.
    job = stack.wait(submit_a2v(stack, model, omni["speech"], fps=25), timeout=60)
    assert job.status == "failed" and job.error_code == "request_rejected", job.error_message
    assert "Unsupported config keys" in (job.error_message or "") and "fps" in (job.error_message or "")


@pytest.mark.parametrize(
    ("model", "mode", "code", "words"),
    [
        # OmniRT raises RuntimeError("FlashHead launch failed with exit code 1 ... Recent output"),
        # uncaught: a traceback and exit 1 from the CLI, a failed job on the server.
        ("omnirt", "exit1", "model_crashed", "FlashHead launch failed with exit code 1"),
        ("omnirt-serve", "exit1", "model_error", "FlashHead launch failed with exit code 1"),
        ("omnirt", "oom", "out_of_memory", "out of memory"),
        ("omnirt-serve", "oom", "out_of_memory", "out of memory"),
        # The CLI's exit 2 also covers export's FileNotFoundError; the adapter tells them apart.
        ("omnirt", "missing", "output_missing", "FlashHead output file missing"),
        ("omnirt-serve", "missing", "output_missing", "FlashHead output file missing"),
    ],
)
def test_the_scripts_failures_through_omnirt(
    omni: dict[str, Any], model: str, mode: str, code: str, words: str
) -> None:
    stack: Stack = omni["stack"]
    omni["checkout"].set_mode(mode)
    job = stack.wait(submit_a2v(stack, model, omni["speech"]), timeout=60)
    assert job.status == "failed" and job.error_code == code, job.error_message
    assert words in (job.error_message or ""), job.error_message


def test_cli_cancel_stops_omnirt_and_its_generate_video(omni: dict[str, Any]) -> None:
    stack: Stack = omni["stack"]
    checkout: FakeCheckout = omni["checkout"]
    checkout.set_mode("hang")
    job_id = submit_a2v(stack, "omnirt", omni["speech"])
    _wait_for_script(checkout)
    assert stack.client.post(f"/jobs/{job_id}/cancel").status_code == 202
    assert stack.wait(job_id, timeout=20).status == "canceled"
    # generate_video.py runs under OmniRT's `bash -lc`, in omnirt's process group: gone too.
    assert gone([r["pid"] for r in checkout.records()])


def test_cli_timeout_stops_omnirt_and_its_generate_video(omni: dict[str, Any]) -> None:
    stack: Stack = omni["stack"]
    checkout: FakeCheckout = omni["checkout"]
    checkout.set_mode("hang")
    job = stack.wait(submit_a2v(stack, "omnirt-short", omni["speech"]), timeout=40)
    assert job.status == "failed" and job.error_code == "timeout", job.error_message
    assert gone([r["pid"] for r in checkout.records()])


def test_server_cancel_deletes_the_job_and_says_a_running_one_goes_on(omni: dict[str, Any]) -> None:
    stack: Stack = omni["stack"]
    checkout: FakeCheckout = omni["checkout"]
    checkout.set_mode("slow:6")
    job_id = submit_a2v(stack, "omnirt-serve", omni["speech"])
    _wait_for_script(checkout)
    assert stack.client.post(f"/jobs/{job_id}/cancel").status_code == 202
    assert stack.wait(job_id, timeout=15).status == "canceled"
    log = job_log(stack, job_id)
    assert "OmniRT cannot stop a running job" in log, log
    omnirt_id = log.split("omnirt serve job ")[1].split(" ", 1)[0]
    assert omni["server"].job(omnirt_id)["state"] == "running", "DELETE leaves a running job running"
    _wait_for_server_job(omni["server"], omnirt_id)


def test_server_timeout_ends_our_job_while_omnirt_finishes_its_own(omni: dict[str, Any]) -> None:
    stack: Stack = omni["stack"]
    checkout: FakeCheckout = omni["checkout"]
    checkout.set_mode("slow:8")
    job = stack.wait(submit_a2v(stack, "omnirt-serve-short", omni["speech"]), timeout=30)
    assert job.status == "failed" and job.error_code == "timeout", job.error_message
    data = report(stack, str(job.id))
    left = data["extra"]["omnirt_left_running"]
    assert left["state"] == "running" and data["extra"]["omnirt_job_id"] in left["job"]
    _wait_for_server_job(omni["server"], data["extra"]["omnirt_job_id"])


def test_only_the_cpu_stub_guard_differs_from_the_wheel() -> None:
    ensure_venv()
    assert modified_files() == [GUARD_FILE], f"omnirt {VERSION} must be as released but for the guard"


def _wait_for_script(checkout: FakeCheckout) -> None:
    deadline = time.monotonic() + 30
    while not checkout.records("generate_video.py") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert checkout.records("generate_video.py"), "generate_video.py never started"


def _wait_for_server_job(server: OmniRTServe, job_id: str) -> None:
    """The abandoned job ends on its own (the next test then gets the server's one worker)."""
    deadline = time.monotonic() + 30
    while server.job(job_id)["state"] not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, server.job(job_id)
        time.sleep(0.2)
