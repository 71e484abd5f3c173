"""OpenAI's and vLLM-Omni's fields onto catalog models, and jobs onto OpenAI's video object."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from openai.types import Video

from jobservice.catalog import ModelSpec
from jobservice.db.tables import Job, JobStatus
from jobservice.errors import Invalid, NotFound
from jobservice.families.params import WanParams
from jobservice.families.reference import REFERENCE_T2V, REFERENCE_TALKING_HEAD
from jobservice.http.api.openai.mapping import model_params
from jobservice.http.api.openai.view import clip_seconds, clip_size, openai_error_body, video_view

WAN = ModelSpec(
    id="wan-test",
    task="text2video",
    title="Wan",
    summary="Wan-shaped parameters (4k+1 frames).",
    maturity="reference",
    params=WanParams,
    adapter="workers.adapters.none:None",
)


def refused(spec: ModelSpec, fields: dict[str, Any]) -> Invalid:
    with pytest.raises(Invalid) as caught:
        model_params(spec, fields)
    return caught.value


def test_size_and_seconds_become_width_height_and_frames_at_the_models_fps() -> None:
    params = model_params(
        REFERENCE_T2V, {"model": "reference-t2v", "prompt": "p", "size": "128x96", "seconds": "2"}
    )
    assert params == {"prompt": "p", "width": 128, "height": 96, "num_frames": 32}
    at_8_fps = model_params(REFERENCE_T2V, {"prompt": "p", "seconds": "3", "fps": "8"})
    assert at_8_fps["num_frames"] == 24


def test_seconds_take_the_nearest_frame_count_the_model_accepts() -> None:
    # Wan makes 4k+1 frames: 4 s at 16 fps is 65 frames, and that clip is reported as "4" seconds.
    params = model_params(WAN, {"prompt": "p", "seconds": "4"})
    assert params["num_frames"] == 65
    assert WanParams.model_validate(params).num_frames == 65
    assert clip_seconds({"num_frames": 65, "fps": 16}, {}) == "4"
    assert clip_seconds({"num_frames": 40, "fps": 16}, {}) == "2.5"


def test_vllm_omni_fields_pass_through_num_frames_wins_over_seconds_and_size_over_width() -> None:
    fields = {
        "prompt": "p",
        "size": "128x96",
        "width": "64",
        "seconds": "4",
        "num_frames": "17",
        "num_inference_steps": "2",
        "guidance_scale": "3.5",
        "seed": "7",
        "negative_prompt": "blur",
        "user": "someone",
        "webhook": "https://example.com/hook",
    }
    params = model_params(REFERENCE_T2V, fields)
    assert params["width"] == 128 and params["height"] == 96  # vLLM-Omni: size overrides width/height
    assert params["num_frames"] == "17"
    assert params["num_inference_steps"] == "2" and params["seed"] == "7"
    assert "user" not in params and params["webhook"] == "https://example.com/hook"


def test_vllm_omnis_video_params_block_and_switches_left_at_their_defaults() -> None:
    """As vLLM-Omni's VideoGenerationRequest reads them (protocol/videos.py): the block fills what
    the top level leaves out; generate_sound=false and interpolation off ask for nothing."""
    fields = {
        "prompt": "p",
        "fps": 16,
        "video_params": '{"num_frames": 17, "fps": 24, "width": 128}',  # JSON text, as in a form
        "generate_sound": "false",
        "enable_frame_interpolation": False,
        "frame_interpolation_exp": "1",
        "frame_interpolation_scale": 1.0,
    }
    params = model_params(REFERENCE_T2V, fields)
    assert params == {"prompt": "p", "fps": 16, "num_frames": 17, "width": 128}
    assert model_params(REFERENCE_T2V, {"prompt": "p", "video_params": {"height": 96}})["height"] == 96
    for asks in ({"generate_sound": "true"}, {"frame_interpolation_exp": 2}, {"true_cfg_scale": 4.0}):
        assert refused(REFERENCE_T2V, {"prompt": "p", **asks}).field == next(iter(asks))
    for bad in ("[1]", "not json", {"seconds": 4}):
        assert refused(REFERENCE_T2V, {"prompt": "p", "video_params": bad}).field == "video_params"


def test_a_size_the_model_cannot_make_names_the_allowed_values() -> None:
    big = refused(REFERENCE_T2V, {"prompt": "p", "size": "1920x1080"})
    assert big.code == "invalid_size" and big.field == "size"
    assert "64 to 1280" in big.message and "multiples of 16" in big.message
    odd = refused(REFERENCE_T2V, {"prompt": "p", "size": "100x100"})
    assert "multiple of 16" in odd.message
    area = refused(REFERENCE_T2V, {"prompt": "p", "size": "1280x1280"})
    assert "1280 x 720" in area.message  # the model-wide rule, not only each side's
    assert refused(REFERENCE_T2V, {"prompt": "p", "size": "big"}).code == "invalid_size"


def test_a_length_the_model_cannot_make_names_the_allowed_range() -> None:
    long = refused(REFERENCE_T2V, {"prompt": "p", "seconds": "60"})
    assert long.code == "invalid_seconds" and long.field == "seconds"
    assert "0.50 to 15.06 s" in long.message and "16 fps" in long.message
    for bad in ("-1", "0", "four", "nan"):
        assert refused(REFERENCE_T2V, {"prompt": "p", "seconds": bad}).code == "invalid_seconds"


def test_an_audio_driven_model_takes_no_size_seconds_or_prompt() -> None:
    assert "max_size" in refused(REFERENCE_TALKING_HEAD, {"size": "512x512"}).message
    assert "audio" in refused(REFERENCE_TALKING_HEAD, {"seconds": "4"}).message
    params = model_params(REFERENCE_TALKING_HEAD, {"prompt": "the SDK always sends one", "fps": "25"})
    assert params == {"fps": "25"}


def _job(status: JobStatus, **values: Any) -> Job:
    created = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    job = Job(
        id=uuid.uuid4(),
        task="text2video",
        model="reference-t2v",
        params={"prompt": "a kite", "width": 128, "height": 96, "num_frames": 32, "fps": 16},
        input_meta={},
        status=status,
        progress=0.5,
        created_at=created,
        expires_at=created + timedelta(days=30),
    )
    for key, value in values.items():
        setattr(job, key, value)
    return job


@pytest.mark.parametrize(
    ("status", "word"),
    [
        (JobStatus.QUEUED, "queued"),
        (JobStatus.RUNNING, "in_progress"),
        (JobStatus.SUCCEEDED, "completed"),
        (JobStatus.FAILED, "failed"),
        (JobStatus.CANCELED, "failed"),
    ],
)
def test_the_video_object_has_openais_fields_types_and_status_words(status: JobStatus, word: str) -> None:
    finished = datetime(2026, 12, 1, 8, 1, tzinfo=UTC) if status.is_terminal else None
    view = video_view(_job(status, finished_at=finished, error_code="out_of_memory", error_message="OOM"))
    body = view.model_dump(mode="json")
    # The SDK's own model accepts it (its size type lists only Sora's sizes, so that one is checked apart).
    parsed = Video.model_validate({**body, "size": "720x1280"})
    assert parsed.status == word and body["size"] == "128x96" and body["seconds"] == "2"
    assert body["created_at"] == int(datetime(2026, 12, 1, 8, 0, tzinfo=UTC).timestamp())
    assert isinstance(body["expires_at"], int)
    assert body["progress"] == (100 if status == JobStatus.SUCCEEDED else 50)
    assert (body["completed_at"] is not None) == status.is_terminal
    if status == JobStatus.CANCELED:
        assert body["error"] == {"code": "canceled", "message": "OOM"}
    elif status == JobStatus.FAILED:
        assert body["error"] == {"code": "out_of_memory", "message": "OOM"}
    else:
        assert body["error"] is None


def test_an_audio_driven_video_reports_the_portraits_framing_and_the_speechs_length() -> None:
    inputs = {"image": {"width": 1024, "height": 1280}, "audio": {"duration_s": 2.04}}
    assert clip_size({"max_size": 512}, inputs) == "416x512"
    assert (
        clip_size({"max_size": 1280}, {"image": {"width": 300, "height": 200}}) == "304x192"
    )  # multiples of 16, as the model frames it
    assert clip_size({}, {}) == ""
    assert clip_seconds({"fps": 25, "max_size": 512}, inputs) == "2.04"


def test_errors_have_openais_shape() -> None:
    body = openai_error_body(NotFound("model_not_found", "No model 'sora-2'.", field="model"), 404)
    assert body == {
        "error": {
            "message": "No model 'sora-2'.",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }
    auth = openai_error_body(Invalid("unauthorized", "Send a key."), 401)["error"]
    assert auth["type"] == "authentication_error" and auth["param"] is None


def test_odd_values_are_refusals_never_crashes() -> None:
    for fps in ("0", "-8", "nan", "inf", "x"):
        params = model_params(REFERENCE_T2V, {"prompt": "p", "seconds": "2", "fps": fps})
        assert "num_frames" not in params  # left to the model's schema, which refuses the fps
    for seconds in ("inf", "1e400", "True", "[]"):
        assert refused(REFERENCE_T2V, {"prompt": "p", "seconds": seconds}).code == "invalid_seconds"
    for size in ("0x0", "x", "64", "64x64x64", "99999x99999"):
        assert refused(REFERENCE_T2V, {"prompt": "p", "size": size}).code == "invalid_size"
