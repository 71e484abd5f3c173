"""Pure parts of the web UI: chart geometry, form fields from schemas, the session key, wording."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr

from jobservice.catalog import ModelParams, ModelSpec
from jobservice.families.reference import REFERENCE_T2V, REFERENCE_TALKING_HEAD
from jobservice.http.web.charts import format_ms, format_value, stage_bar, timeline
from jobservice.http.web.forms import param_fields
from jobservice.http.web.security import content_security_policy, session_secret
from jobservice.http.web.wording import failure_text, queue_text, stage_text
from jobservice.reports.run_report import Segment
from jobservice.settings import Settings


def test_timeline_positions_segments_and_ticks() -> None:
    line = timeline(
        4.0,
        [Segment(start_s=1.0, end_s=2.0, duration_s=1.0)],
        [
            Segment(start_s=3.9, end_s=9.0, duration_s=5.1, open_ended=True),
            Segment(start_s=0, end_s=0.001, duration_s=0.001),
        ],
    )
    assert line is not None
    assert (line.black[0].x_pct, line.black[0].width_pct) == (25.0, 25.0)
    assert line.freeze[0].x_pct == 97.5 and line.freeze[0].width_pct == 2.5  # clipped to the end
    assert line.freeze[1].width_pct == 0.4  # a sliver stays visible
    assert [t.label for t in line.ticks] == [
        "0 s",
        "0.5 s",
        "1 s",
        "1.5 s",
        "2 s",
        "2.5 s",
        "3 s",
        "3.5 s",
        "4 s",
    ]
    assert line.ticks[0].anchor == "start" and line.ticks[-1].anchor == "end"
    assert timeline(None, [], []) is None and timeline(0.0, [], []) is None


def test_stage_bar_stacks_stages_and_names_the_rest() -> None:
    bar = stage_bar(
        {"fetch_ms": 100, "generate_ms": 600, "upload_ms": 100, "total_ms": 1000, "queue_wait_ms": 5}
    )
    assert bar is not None and bar.total_ms == 1000
    assert [(s.key, s.x_pct, s.width_pct) for s in bar.spans] == [
        ("fetch", 0.0, 10.0),
        ("generate", 10.0, 60.0),
        ("upload", 70.0, 10.0),
        ("other", 80.0, 20.0),
    ]
    assert stage_bar({}) is None
    assert stage_bar({"generate_ms": 50}) is not None


def test_formatting() -> None:
    assert (format_ms(850), format_ms(2400), format_ms(185_000), format_ms(None)) == (
        "850 ms",
        "2.4 s",
        "3 min 05 s",
        "–",
    )
    assert format_value(True) == "yes" and format_value(0.123456) == "0.1235"
    assert format_value(["h264", "hevc"]) == "h264, hevc" and format_value(None) == "–"


class Exotic(ModelParams):
    mode: Literal["fast", "best"] = Field(default="best", description="Speed or quality.")
    sharpen: bool = False
    strength: float = Field(default=0.5, gt=0, le=1)
    note: str | None = None


def test_param_fields_follow_the_schema() -> None:
    fields = {f.name: f for f in param_fields(REFERENCE_T2V)}
    prompt = fields["prompt"]
    assert prompt.kind == "textarea" and prompt.required and prompt.max_length == 2000
    width = fields["width"]
    assert (width.kind, width.step, width.minimum, width.maximum) == ("number", "16", 64, 1280)
    assert width.hint == "default 512 · 64 to 1280 · a multiple of 16"
    assert fields["guidance_scale"].step == "any"
    assert fields["seed"].hint.startswith("random if empty")
    head = {f.name: f for f in param_fields(REFERENCE_TALKING_HEAD)}
    assert list(head)[:2] == ["seed", "fps"]

    spec = ModelSpec(
        id="x", task="text2video", title="x", summary="x", maturity="reference", params=Exotic, adapter="a:b"
    )
    exotic = {f.name: f for f in param_fields(spec)}
    assert exotic["mode"].kind == "select" and exotic["mode"].choices == ("fast", "best")
    assert exotic["sharpen"].kind == "checkbox"
    assert exotic["strength"].hint == "default 0.5 · above 0, at most 1"
    assert exotic["note"].kind == "text" and exotic["note"].hint == "optional"


def test_session_secret_is_stored_once_and_private(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, var_dir=tmp_path / "var")  # type: ignore[call-arg]
    first = session_secret(settings)
    path = tmp_path / "var" / "secret_key"
    assert len(first) >= 48 and path.read_text() == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert session_secret(settings) == first  # every process sharing var_dir signs alike
    assert [p.name for p in path.parent.iterdir()] == ["secret_key"]
    given = Settings(_env_file=None, var_dir=tmp_path / "other", secret_key=SecretStr("s3cret"))  # type: ignore[call-arg]
    assert session_secret(given) == "s3cret" and not (tmp_path / "other").exists()


def test_csp_allows_s3_media_only_when_used(tmp_path: Path) -> None:
    local = Settings(_env_file=None, var_dir=tmp_path)  # type: ignore[call-arg]
    assert "media-src 'self' blob:;" in content_security_policy(local)
    s3 = Settings(  # type: ignore[call-arg]
        _env_file=None,
        var_dir=tmp_path,
        storage_backend="s3",
        s3_public_endpoint_url="https://cdn.example:9000/x",
    )
    assert "media-src 'self' blob: https://cdn.example:9000;" in content_security_policy(s3)


def test_wording() -> None:
    assert (
        "quality checks" in failure_text("validation_failed")
        and failure_text("new_code") == "The job failed."
    )
    assert stage_text("running", "generating") == "Generating frames"
    assert stage_text("running", "generating", cancel_requested=True).startswith("Stopping")
    assert stage_text("succeeded", "done") == "Finished"
    assert (queue_text(0), queue_text(3), queue_text(None)) == ("next in line", "3 ahead", "")


def test_stage_bar_of_a_stopped_run_draws_the_unfinished_stage() -> None:
    bar = stage_bar({"fetch_ms": 10, "load_ms": 90, "total_ms": 1000}, stopped_in="generating")
    assert bar is not None
    assert [(s.key, s.label, s.width_pct) for s in bar.spans][-1] == ("generate", "generate (stopped)", 90.0)
    other = stage_bar({"fetch_ms": 10, "load_ms": 90, "total_ms": 1000}, stopped_in="queued")
    assert other is not None and other.spans[-1].key == "other"
