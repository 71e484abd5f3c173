"""The FlashTalk adapter and jobservice's REAL resident script against a fake upstream
``flash_talk`` package (tests/standins/fake_flash_talk), in upstream's two return shapes:

* ``upstream``: plain Soul-AILab/SoulX-FlashTalk. ``FlashTalkPipeline.generate`` returns only the
  new frames (28 of 33) and ``flash_talk/inference.py`` ignores the FLASHTALK_* variables, so the
  checkout's ``infer_params.yaml`` is in force whatever the job asks;
* ``patched``: OmniRT's patched checkout. ``generate`` returns all ``frame_num`` frames and the
  FLASHTALK_* variables override the YAML.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jobservice.families.flashtalk import FlashTalkParams
from jobservice.fleet.placement import parse_devices
from tests.fakes.context import RecordingContext
from tests.realmodels.conftest import ROOT, deployed_spec
from tests.standins.deploy import FakeCheckout, flashtalk_upstream_checkout
from workers.adapters.base import AdapterError, JobInputs
from workers.adapters.soulx.flashtalk import FlashTalkAdapter

pytestmark = pytest.mark.slow
SECONDS = 13.24  # the jobs: 331 frames at 25 fps, 12 chunks of 28 new frames
# The checkout's YAML: upstream's values, frames made small so the test is quick.
# Keyword arguments of flashtalk_upstream_checkout: YAML values over upstream's infer_params.yaml.
UPSTREAM_YAML: dict[str, Any] = {"height": 256, "width": 192}
PATCHED_YAML = {"frame_num": 29, "motion_frames_num": 1, "sample_steps": 2, "height": 704, "width": 416}
VARIANTS: dict[str, dict[str, Any]] = {
    "upstream": {"frames": "new_frames_only", "reads_env": False, **UPSTREAM_YAML},
    "patched": {"frames": "all_frames", "reads_env": True, **PATCHED_YAML},
}
REQUEST = {"height": 256, "width": 256}  # the realtime preset, smaller frames


def speech(folder: Path, seconds: float) -> Path:
    """``seconds`` of the sample speech (looped: it is 7.35 s long), 16 kHz mono."""
    out = folder / f"speech-{seconds:g}s.wav"
    if not out.exists():
        subprocess.run(
            ["ffmpeg", "-v", "error", "-y", "-stream_loop", "2", "-i", str(ROOT / "samples" / "speech.wav")]
            + ["-t", str(seconds), "-ac", "1", "-ar", "16000", str(out)],
            check=True,
        )
    return out


def ft_params(**overrides: Any) -> dict[str, Any]:
    return FlashTalkParams.model_validate({**REQUEST, **overrides}).model_dump(mode="json")


def start(tmp_path: Path, checkout: FakeCheckout, devices: str = "npu:0") -> tuple[FlashTalkAdapter, Any]:
    entry = checkout.script_entry(
        resident_script=checkout.extra["resident_script"],
        cards=len(parse_devices(devices).indices),
        chunk_timeout=60,
        startup_timeout=120,
        cancel_grace=10,
    )
    spec = deployed_spec(tmp_path, "soulx-flashtalk-14b", entry)
    adapter = FlashTalkAdapter(memory_reader=lambda device: None)
    config = {**spec.config, "_runtime": {"state_dir": str(tmp_path / "state")}}
    return adapter, adapter.load(parse_devices(devices), config)


def job(tmp_path: Path, name: str, audio: Path, params: dict[str, Any]) -> tuple[JobInputs, RecordingContext]:
    scratch = tmp_path / name
    scratch.mkdir()
    files = {"image": ROOT / "samples" / "portrait.png", "audio": audio}
    return JobInputs(job_id=name, model="soulx-flashtalk-14b", params=params, files=files, scratch=scratch), (
        RecordingContext(scratch)
    )


def bar_rows(ctx: RecordingContext) -> list[int]:
    """Where the fake's moving bar is in each frame (it moves 7 rows per new frame)."""
    rows = []
    for frame in ctx.frames:
        means = frame.astype(np.float32).mean(axis=1)  # [H, 3]
        hits = np.flatnonzero((means[:, 0] > 200) & (means[:, 1] < 100))
        rows.append(int(hits[0]) if hits.size else -1)
    return rows


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_both_return_shapes_give_the_audio_duration_with_one_model_load(tmp_path: Path, variant: str) -> None:
    checkout = flashtalk_upstream_checkout(tmp_path / "site", **VARIANTS[variant])
    adapter, handle = start(tmp_path, checkout)
    audio = speech(tmp_path, SECONDS)
    try:
        runs = []
        for name, seed in (("first", 1), ("second", 2)):
            inputs, ctx = job(tmp_path, name, audio, ft_params(seed=seed))
            runs.append((adapter.run(handle, inputs, ctx), ctx))
    finally:
        adapter.unload(handle)
    (first, cold), (second, warm) = runs
    height, width = (256, 192) if variant == "upstream" else (256, 256)
    for out, ctx in runs:
        assert out.frames_generated == 331 == ctx.frame_count and out.media_duration_s == pytest.approx(
            SECONDS
        )
        assert ctx.format is not None and (ctx.format.height, ctx.format.width) == (height, width)
        assert ctx.format.num_frames == 331 and ctx.format.fps == 25.0
        assert len(ctx.chunks) == 12 and {c.frames for c in ctx.chunks} == {28}
        frame_h = height - 8
        assert bar_rows(ctx) == [(k * 7) % frame_h for k in range(331)], "frames lost or repeated"
    returned = 28 if variant == "upstream" else 29
    case = "new_frames_only" if variant == "upstream" else "all_frames"
    assert cold.extra["chunk_frames"] == {"case": case, "returned": returned, "kept": 28}
    assert (cold.extra["pipeline_reused"], warm.extra["pipeline_reused"]) == (False, True)
    assert (cold.cold_start, warm.cold_start) == (True, False)
    (load,) = checkout.records("flash_talk.get_pipeline")  # one model load for both jobs
    assert load["world_size"] == 1 and load["cwd"] == str(checkout.repo)
    bases = checkout.records("flash_talk.get_base_data")
    assert [b["seed"] for b in bases] == [1, 2] and len({(b["pid"], b["pipeline"]) for b in bases}) == 1
    in_force = warm.extra["settings_in_force"]
    frame_num = 33 if variant == "upstream" else 29
    assert (in_force["height"], in_force["width"], in_force["frame_num"]) == (height, width, frame_num)
    if variant == "upstream":
        assert (in_force["frame_num"], in_force["motion_frames_num"], in_force["sample_steps"]) == (33, 5, 4)
        not_honoured = warm.extra["settings_not_honoured"]
        assert not_honoured["frame_num"] == {"requested": 29, "in_force": 33}
        assert not_honoured["width"] == {"requested": 256, "in_force": 192}
        (text,) = warm.extra["warnings"]
        assert "'realtime' was not honoured" in text and "infer_params.yaml" in text
    else:
        assert warm.extra["settings_not_honoured"] == {} and "warnings" not in warm.extra


def test_a_chunk_of_any_other_length_is_a_model_error_naming_both_counts(tmp_path: Path) -> None:
    checkout = flashtalk_upstream_checkout(tmp_path / "site", frames=30, **UPSTREAM_YAML)
    adapter, handle = start(tmp_path, checkout)
    try:
        inputs, ctx = job(tmp_path, "broken", speech(tmp_path, 2.0), ft_params())
        with pytest.raises(AdapterError) as failure:
            adapter.run(handle, inputs, ctx)
        assert failure.value.code == "model_error"
        assert "returned 30 frames" in failure.value.message and "28" in failure.value.message
        assert "33" in failure.value.message and ctx.frame_count == 0
        again, next_ctx = job(tmp_path, "again", speech(tmp_path, 2.0), ft_params())
        with pytest.raises(AdapterError):
            adapter.run(handle, again, next_ctx)
        assert next_ctx.extra["pipeline_reused"] is True, "an error answer keeps the resident"
    finally:
        adapter.unload(handle)


def test_a_checkout_that_fixes_its_settings_serves_every_preset_with_one_load(tmp_path: Path) -> None:
    checkout = flashtalk_upstream_checkout(tmp_path / "site", **VARIANTS["upstream"])
    adapter, handle = start(tmp_path, checkout)
    audio = speech(tmp_path, 2.0)
    try:
        first_inputs, first = job(tmp_path, "realtime", audio, ft_params())
        adapter.run(handle, first_inputs, first)
        other_inputs, other = job(tmp_path, "quality", audio, ft_params(preset="quality"))
        out = adapter.run(handle, other_inputs, other)
    finally:
        adapter.unload(handle)
    assert other.extra["pipeline_reused"] is True and out.frames_generated == 50
    assert len(checkout.records("flash_talk.get_pipeline")) == 1
    assert other.extra["settings_not_honoured"] == {"width": {"requested": 256, "in_force": 192}}
    assert "'quality' was not honoured" in other.extra["warnings"][0]


def test_two_ranks_under_torchrun_serve_through_the_broadcast(tmp_path: Path) -> None:
    checkout = flashtalk_upstream_checkout(tmp_path / "site", **VARIANTS["upstream"])
    adapter, handle = start(tmp_path, checkout, devices="npu:0-1")
    try:
        inputs, ctx = job(tmp_path, "two", speech(tmp_path, 2.0), ft_params())
        out = adapter.run(handle, inputs, ctx)
    finally:
        adapter.unload(handle)
    assert out.frames_generated == 50 == ctx.frame_count and ctx.extra["chunk_frames"]["returned"] == 28
    loads = checkout.records("flash_talk.get_pipeline")
    assert sorted(r["env"]["RANK"] for r in loads) == ["0", "1"] and {r["world_size"] for r in loads} == {2}
    assert len(checkout.records("flash_talk.get_base_data")) == 2, "every rank runs every op"
