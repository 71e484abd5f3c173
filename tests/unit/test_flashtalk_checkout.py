"""What a FlashTalk checkout runs with against what a job asked for, and which frames of a chunk
are new (workers/adapters/soulx/flashtalk_checkout.py, flashtalk_resident.new_frames_of)."""

from __future__ import annotations

from jobservice.families.flashtalk import FlashTalkParams
from workers.adapters.soulx.flashtalk_checkout import effective_key, not_honoured, requested, warning
from workers.adapters.soulx.flashtalk_resident import new_frames_of


def test_the_frames_kept_follow_the_count_run_pipeline_returned() -> None:
    assert new_frames_of(28, 33, 5) == ("new_frames_only", 0)  # upstream's generate
    assert new_frames_of(33, 33, 5) == ("all_frames", 5)  # OmniRT's patched checkout
    assert new_frames_of(29, 29, 1) == ("all_frames", 1) and new_frames_of(28, 29, 1) == (
        "new_frames_only",
        0,
    )
    assert new_frames_of(23, 33, 5) == (None, 0) and new_frames_of(0, 33, 5) == (None, 0)


def test_requested_settings_are_compared_with_those_in_force() -> None:
    params = FlashTalkParams.model_validate({}).model_dump(mode="json")  # the realtime preset
    wanted = requested(params)
    upstream_yaml = {"height": 768, "width": 448, "frame_num": 33, "motion_frames_num": 5}
    upstream_yaml |= {"sample_steps": 4, "color_correction_strength": 1, "tgt_fps": 25}
    diff = not_honoured(wanted, upstream_yaml)
    assert set(diff) == set(wanted) and diff["frame_num"] == {"requested": 29, "in_force": 33}
    assert not_honoured(wanted, {**wanted, "color_correction_strength": 0}) == {}  # 0 == 0.0
    assert not_honoured(wanted, {}) == {}, "a setting the resident does not report is not judged"
    text = warning("realtime", {"height": diff["height"]})
    assert text.startswith("The requested preset 'realtime' was not honoured: the model ran with height 768")
    assert "(requested 704)" in text and "infer_params.yaml" in text


def test_settings_a_checkout_fixes_no_longer_tell_residents_apart() -> None:
    realtime = FlashTalkParams.model_validate({}).model_dump(mode="json")
    quality = FlashTalkParams.model_validate({"preset": "quality"}).model_dump(mode="json")
    assert effective_key(realtime, {}) != effective_key(quality, {})
    fixed: dict[str, float] = {
        "height": 768,
        "width": 448,
        "frame_num": 33,
        "motion_frames_num": 5,
        "sample_steps": 4,
    }
    fixed["color_correction_strength"] = 1.0
    assert effective_key(realtime, fixed) == effective_key(quality, fixed)
