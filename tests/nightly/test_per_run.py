"""Cold and warm figures: back ends that load the model in every run are measured on every run
(labelled cold), resident ones on warm runs; comparisons never mix the two; the seed-table export
says "n/a (why)" instead of leaving a blank. Hand-made reports, no database.
"""

from __future__ import annotations

import csv
import io
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jobservice.db.tables import Batch
from jobservice.nightly.compare import compare_results
from jobservice.nightly.figures import RunFacts, run_facts
from jobservice.nightly.finalize import case_results, judge
from jobservice.nightly.render import TABLE_METRICS, render_comparison_text, render_csv, render_markdown
from jobservice.reports.run_report import model_residency_of, residency_for
from tests.fakes.context import RecordingContext
from workers.adapters.soulx.flashhead import record_chunk_costs

SPEC = {"metrics": [{"name": n} for n in ("generate_ms", "render_fps", "rtf", "ttff_ms", "cold_start_ms")]}
CASE = {"name": "head", "model": "soulx-flashhead-1.3b", "digest": "d", "repeat": 3}


def report(generate_ms: float, **extra: Any) -> dict[str, Any]:
    """A FlashHead-like report: a process per job, every run cold, a finished file (no frames)."""
    return {
        "execution_mode": "subprocess",
        "cold_start": True,
        "model_residency": "per_run",
        "timings": {"generate_ms": generate_ms, "total_ms": generate_ms + 300},
        "render_fps": round(250 / (generate_ms / 1000), 3),
        "rtf": round(generate_ms / 1000 / 10, 4),
        "frames_generated": 250,
        "device_placement": {"device": "npu:2,3"},
        "chunk_summary": {},
        **extra,
    }


def facts(reports: list[dict[str, Any]]) -> list[RunFacts]:
    return [
        run_facts(
            r, job_id=str(i), repeat=i, status="succeeded", error_code=None, verdict="passed", cold=None
        )
        for i, r in enumerate(reports)
    ]


def resident(generate_ms: float, *, cold: bool) -> dict[str, Any]:
    started = datetime(2026, 1, 1, tzinfo=UTC)
    return {
        "execution_mode": "resident",
        "cold_start": cold,
        "model_residency": "resident",
        "timings": {"generate_ms": generate_ms, "total_ms": generate_ms + (5000 if cold else 100)},
        "render_fps": 10.0,
        "rtf": 0.5,
        "generate_started_at": started.isoformat(),
        "first_frame_at": (started + timedelta(milliseconds=200)).isoformat(),
        "device_placement": {"device": "cpu"},
    }


def test_every_run_of_a_per_run_back_end_counts_and_is_labelled_cold() -> None:
    result = case_results(CASE, facts([report(69_500), report(70_100), report(69_800)]))
    assert result["figures"] == "cold"
    assert result["samples"]["generate_ms"] == [69_500, 70_100, 69_800]
    assert len(result["samples"]["render_fps"]) == 3 and len(result["samples"]["cold_start_ms"]) == 3
    assert "no frame is seen" in result["unavailable"]["ttff_ms"]
    assert "chunk telemetry" in result["unavailable"]["steady_chunk_core_ms"]
    assert "OmniRT" in result["unavailable"]["denoise_loop_ms"]


def test_a_resident_back_end_keeps_warm_figures_and_its_cold_start_apart() -> None:
    runs = facts([resident(900, cold=True), resident(500, cold=False), resident(510, cold=False)])
    result = case_results(CASE, runs)
    assert result["figures"] == "warm"
    assert result["samples"]["generate_ms"] == [500, 510] and result["samples"]["cold_start_ms"] == [5900]
    assert result["unavailable"]["peak_mb"] == "a cpu run has no device memory"
    only_cold = case_results(CASE, facts([resident(900, cold=True)]))
    assert only_cold["figures"] is None
    assert "every run loaded the model (cold)" in only_cold["unavailable"]["generate_ms"]


def test_older_reports_are_classified_from_their_execution_mode() -> None:
    assert residency_for("subprocess", True) == "per_run"  # FlashHead, OmniRT CLI
    assert residency_for("subprocess", False) == "resident"
    assert residency_for("http", False) == "resident"  # vLLM-Omni, OmniRT server
    assert residency_for("persistent_worker", True) == "resident"  # FlashTalk's first job
    old = {k: v for k, v in report(1000).items() if k != "model_residency"}
    assert model_residency_of(old) == "per_run" and facts([old])[0].per_run


def results(*cases: dict[str, Any]) -> dict[str, Any]:
    return {"cases": list(cases)}


def test_a_5pc_slower_per_run_case_is_flagged_and_kinds_are_never_mixed() -> None:
    base = case_results(CASE, facts([report(69_500), report(69_700), report(69_600)]))
    slow = case_results(CASE, facts([report(73_000), report(73_200), report(73_100)]))
    compared = compare_results(results(base), results(slow), spec=SPEC)
    (head,) = compared["cases"]
    by_name = {m["metric"]: m for m in head["metrics"]}
    assert head["verdict"] == "regressed" and by_name["generate_ms"]["verdict"] == "regression"
    assert by_name["generate_ms"]["figures"] == "cold" and by_name["rtf"]["verdict"] == "regression"
    assert "no frame is seen" in by_name["ttff_ms"]["note"]
    text = render_comparison_text(compared, verbose=True)
    assert "generate time (cold)" in text and "no baseline samples: the back end hands over" in text

    # A baseline whose figures were warm (the same case on a resident deployment) is not compared.
    warm = {**base, "figures": "warm"}
    (head,) = compare_results(results(warm), results(slow), spec=SPEC)["cases"]
    generate = next(m for m in head["metrics"] if m["metric"] == "generate_ms")
    assert generate["verdict"] == "n/a" and "baseline figures are warm, these are cold" in generate["note"]
    assert head["verdict"] == "inconclusive", "the primary metric (generate time) could not be compared"
    assert head["reasons"] == [
        "generate time, the primary metric, was not compared: baseline figures are warm, these are cold: "
        "not compared"
    ]
    (cold,) = head["others"]  # cold runs on both sides: compared, and reported
    assert cold.startswith("cold start +5.0% (a regression needs +3.0% at α = 0.1 %)")
    # Results stored before kinds existed had warm figures only.
    old = {k: v for k, v in warm.items() if k != "figures"}
    (head,) = compare_results(results(old), results(slow), spec=SPEC)["cases"]
    assert next(m for m in head["metrics"] if m["metric"] == "generate_ms")["verdict"] == "n/a"


def finished(reports: list[dict[str, Any]], baseline: Batch | None = None) -> Batch:
    batch = Batch(
        id=uuid.uuid4(),
        name="nightly",
        status="finished",
        source="cli",
        origin="spec.yaml",
        spec_digest="0" * 64,
        pinned=False,
        spec={**SPEC, "cases": [CASE]},
        environment={},
    )
    outcome = judge(batch, {"head": facts(reports)}, {}, baseline)
    batch.results, batch.verdict = outcome["results"], outcome["verdict"]
    batch.baseline_id = baseline.id if baseline else None
    return batch


def test_the_seed_table_export_fills_every_column_or_says_why() -> None:
    base = finished([report(69_500), report(69_700), report(69_600)])
    batch = finished([report(69_400), report(69_800), report(69_600)], baseline=base)
    (row,) = list(csv.DictReader(io.StringIO(render_csv(batch))))
    assert row["figures"] == "cold" and float(row["generate_ms"]) == 69_600
    for name in TABLE_METRICS:
        assert row[name] and row[f"{name}_baseline"] and row[f"{name}_change"], name
    assert row["ttff_ms"].startswith("n/a (the back end hands over a finished video")
    assert row["peak_mb"].startswith("n/a (no device memory figure")
    assert row["ttff_ms_baseline"].startswith("n/a (no baseline samples: the back end hands over")
    assert row["denoise_loop_ms_baseline"] == "n/a (not tracked by the spec)"
    first = list(csv.DictReader(io.StringIO(render_csv(base))))[0]
    assert first["generate_ms_baseline"] == "n/a (no baseline)"
    page = render_markdown(batch)
    assert "| cold (loads the model every run) |" in page
    assert "- time to first frame (ms): n/a (the back end hands over a finished video" in page


def test_flashhead_chunk_costs_become_chunk_telemetry(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_text(
        "2026-04-28 18:09:09.123 | INFO | Data preparation done. Start to generate video...\n"
        "Generate video chunk-0 done, cost time: 6.590s\n"
        "Generate video chunk-1 done, cost time: 0.890s\n"
        "Generate video chunk-1 done, cost time: 0.890s\n"  # a second rank logs it too
        "Generate video chunk-2 done, cost time: 0.900s\n"
    )
    ctx = RecordingContext(tmp_path)
    record_chunk_costs(ctx, "pro")
    assert [(c.index, c.frames, c.core_ms) for c in ctx.chunks] == [(0, 28, 6590), (1, 28, 890), (2, 28, 900)]
    chunks = [c.model_dump() for c in ctx.chunks]
    summary = {"chunk_count": 3.0, "steady_chunk_core_ms_avg": 895.0}
    (run,) = facts([report(9000, chunks=chunks, chunk_summary=summary)])
    assert run.values["first_chunk_ms"] == 6590 and run.values["steady_chunk_core_ms"] == 895.0


def test_omnirt_splits_its_run_and_reports_its_own_memory() -> None:
    """OmniRT's CLI: a process per job (cold figures) with its report's denoise loop and export."""

    def omnirt(denoise: float) -> dict[str, Any]:
        timings = {
            "omnirt_denoise_loop_ms": denoise,
            "omnirt_export_ms": 264.7,
            "omnirt_total_ms": denoise + 900,
        }
        base = report(denoise + 1000, memory={"omnirt_peak_mb": 3890.0})
        return {**base, "timings": {**base["timings"], **timings}}

    result = case_results(CASE, facts([omnirt(69_501), omnirt(69_964), omnirt(69_700)]))
    assert result["figures"] == "cold" and result["samples"]["denoise_loop_ms"] == [69_501, 69_964, 69_700]
    assert result["samples"]["export_ms"] == [264.7] * 3 and result["samples"]["peak_mb"] == [3890.0] * 3
    server = {**omnirt(69_501), "execution_mode": "http", "cold_start": False, "model_residency": "resident"}
    served = case_results(CASE, facts([server, server]))
    assert served["figures"] == "warm" and len(served["samples"]["denoise_loop_ms"]) == 2
    assert served["unavailable"]["cold_start_ms"] == "no run loaded the model: the worker was warm"
