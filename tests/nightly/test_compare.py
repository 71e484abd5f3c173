"""Case verdicts of a comparison, on hand-made results (no database)."""

from __future__ import annotations

import uuid
from typing import Any

from jobservice.db.tables import Batch
from jobservice.nightly.compare import (
    compare_results,
    gate_exit_code,
    has_regression,
    history_medians,
    thresholds_for,
)
from jobservice.nightly.finalize import judge
from jobservice.nightly.render import render_comparison_text

SPEC = {
    "thresholds": {"relative": 0.03, "k": 3},
    "metrics": [{"name": "generate_ms"}, {"name": "peak_rss_mb"}],
}


def case(
    name: str, gen: list[float], *, digest: str = "d", frames: str | None = None, **extra: Any
) -> dict[str, Any]:
    runs = [{"status": "succeeded"} for _ in gen]
    return {
        "name": name,
        "model": "m",
        "digest": digest,
        "deterministic": frames is not None,
        "samples": {"generate_ms": gen, "peak_rss_mb": [500.0] * len(gen)},
        "frames": {"digest": frames, "hashes": ["a", "b"] if frames == "x" else ["a", "c"]},
        "runs": runs,
        "status": "passed",
        **extra,
    }


def test_every_kind_of_verdict_worst_first() -> None:
    baseline = {
        "cases": [
            case("same", [100, 100.3, 99.8]),
            case("noisy", [100, 106, 95]),
            case("slower", [100, 101, 99]),
            case("faster", [100, 101, 99]),
            case("frames", [100, 101, 99], frames="x"),
            case("edited", [100, 101, 99], digest="old"),
            case("gone", [100]),
        ]
    }
    candidate = {
        "cases": [
            case("same", [100.2, 99.9, 100]),
            case("noisy", [102, 96, 107]),
            case("slower", [110, 111, 109]),
            case("faster", [80, 81, 79]),
            case("frames", [100, 101, 99], frames="y"),
            case("edited", [100, 101, 99], digest="new"),
            case("added", [100]),
        ]
    }
    result = compare_results(baseline, candidate, spec=SPEC)
    verdicts = [(c["case"], c["verdict"]) for c in result["cases"]]
    assert verdicts == [
        ("slower", "regressed"),
        ("frames", "regressed"),
        ("edited", "changed"),
        ("gone", "missing"),
        ("noisy", "inconclusive"),
        ("added", "new"),
        ("faster", "improved"),
        ("same", "ok"),
    ]
    frames = next(c for c in result["cases"] if c["case"] == "frames")
    assert frames["frames"] == {"verdict": "changed", "changed_frames": 1, "frames": 2}
    assert result["verdict"] == "regressed" and has_regression(result) and gate_exit_code(result) == 1
    text = render_comparison_text(result, verbose=True)
    assert text.splitlines()[1].split()[:2] == ["REGRESSED", "slower"] and "generate time" in text
    noisy = next(c for c in result["cases"] if c["case"] == "noisy")
    (why,) = noisy["reasons"]
    assert (
        why.startswith("generate time: this run could not tell a change under ") and "repeats per side" in why
    )
    assert "INCONCLUSIVE noisy" in text and "repeats would see it" in text


def test_inconclusive_is_its_own_verdict_and_exit_code() -> None:
    """Nothing regressed, one case could not tell: the batch is inconclusive (exit 3), and a
    regression anywhere still wins (exit 1)."""
    old = {"cases": [case("calm", [100, 100.2, 99.9]), case("noisy", [100, 106, 95])]}
    new = {"cases": [case("calm", [100.1, 100, 99.8]), case("noisy", [103, 96, 107])]}
    result = compare_results(old, new, spec=SPEC)
    assert result["verdict"] == "inconclusive" and result["counts"]["inconclusive"] == 1
    assert not has_regression(result) and gate_exit_code(result) == 3
    calm = next(c for c in result["cases"] if c["case"] == "calm")
    assert calm["verdict"] == "ok" and calm["reasons"] == []
    noisy = next(c for c in result["cases"] if c["case"] == "noisy")
    generate = next(m for m in noisy["metrics"] if m["metric"] == "generate_ms")
    assert generate["detectable"] > generate["floor"] == 0.03 and generate["repeats_needed"] > 3
    new["cases"][0] = case("calm", [110, 110.2, 109.9])
    assert gate_exit_code(compare_results(old, new, spec=SPEC)) == 1
    calm_again = compare_results(old, {"cases": [case("calm", [100.1, 100, 99.8])]}, spec=SPEC)
    assert gate_exit_code(calm_again) == 0 and calm_again["verdict"] == "passed"


def test_a_run_of_one_cannot_tell_small_changes() -> None:
    result = compare_results({"cases": [case("x", [100])]}, {"cases": [case("x", [104])]}, spec=SPEC)
    (judged,) = result["cases"]
    assert judged["verdict"] == "inconclusive" and "one run per side" in judged["reasons"][0]
    big = compare_results({"cases": [case("x", [100])]}, {"cases": [case("x", [120])]}, spec=SPEC)
    assert big["cases"][0]["verdict"] == "regressed"


def test_disturbed_runs_are_counted_per_side() -> None:
    quiet = {"disturbed": False, "other_cores": 0.05}
    busy = {"disturbed": True, "other_cores": 0.9}
    old = case("x", [100, 100.2, 99.9]) | {"runs": [{"status": "succeeded", "host": quiet}] * 3}
    new = case("x", [100, 100.1, 99.9]) | {
        "runs": [
            {"status": "succeeded", "host": busy},
            {"status": "succeeded", "host": quiet},
            {"status": "failed"},
        ]
    }
    (judged,) = compare_results({"cases": [old]}, {"cases": [new]}, spec=SPEC)["cases"]
    assert judged["disturbed"]["candidate"] == {
        "runs": 2,
        "measured": 2,
        "disturbed": 1,
        "other_cores_max": 0.9,
    }
    assert judged["disturbed"]["baseline"]["disturbed"] == 0
    text = render_comparison_text({"cases": [judged], "counts": {}, "verdict": "passed"})
    assert "1 of 2 candidate runs ran beside other work on the host" in text


def test_thresholds_merge_spec_metric_and_floor() -> None:
    spec = {"thresholds": {"relative": 0.02, "k": 2}, "metrics": [{"name": "rtf", "relative": 0.1, "k": 4}]}
    assert thresholds_for(spec, "rtf") == {"relative": 0.1, "k": 4.0, "few_samples_relative": 0.1}
    assert thresholds_for(spec, "peak_rss_mb")["relative"] == 0.05, "memory has its own 5 % floor"
    assert thresholds_for(spec, "generate_ms")["k"] == 2.0


def test_a_failed_case_fails_the_gate_even_without_regressions() -> None:
    failed = case("x", [100, 100], status="failed", expectations=[{"passed": False, "message": "too long"}])
    result = compare_results({"cases": [case("x", [100, 100])]}, {"cases": [failed]}, spec=SPEC)
    assert (
        result["verdict"] == "failed"
        and result["cases"][0]["reasons"] == ["too long"]
        and has_regression(result)
    )


def test_models_that_write_their_own_video_compare_files() -> None:
    def own(digest: str) -> dict[str, Any]:
        return case(
            "ext",
            [100, 100],
            frames="",
        ) | {"frames": {"digest": None, "file_digest": digest}, "deterministic": True}

    same = compare_results({"cases": [own("f1")]}, {"cases": [own("f1")]}, spec=SPEC)["cases"][0]
    assert same["verdict"] == "ok" and same["frames"]["verdict"] == "unchanged"
    other = compare_results({"cases": [own("f1")]}, {"cases": [own("f2")]}, spec=SPEC)["cases"][0]
    assert other["verdict"] == "regressed" and other["reasons"] == [
        "the output video changed (its file differs)"
    ]


def test_a_zero_baseline_median_is_judged_without_a_percentage() -> None:
    # The baseline used no device memory (a CPU run); the candidate 5 MB: no relative change exists.
    old = case("cpu", [100, 100, 100]) | {
        "samples": {"generate_ms": [100, 100, 100], "peak_rss_mb": [0, 0, 0]}
    }
    new = case("cpu", [100, 100, 100]) | {
        "samples": {"generate_ms": [100, 100, 100], "peak_rss_mb": [0, 5, 5]}
    }
    result = compare_results({"cases": [old]}, {"cases": [new]}, spec=SPEC)
    judged = result["cases"][0]
    assert judged["verdict"] == "regressed"
    assert judged["reasons"] == ["peak host memory rose from 0 to 5 MB"]
    memory = next(m for m in judged["metrics"] if m["metric"] == "peak_rss_mb")
    assert memory["change"] is None and memory["note"] == "baseline median is zero"
    assert "peak host memory" in render_comparison_text(result, verbose=True)


def test_one_unreadable_metric_does_not_stop_the_comparison() -> None:
    broken = case("x", [100, 100]) | {"samples": {"generate_ms": ["fast", "slow"], "peak_rss_mb": [500, 500]}}
    judged = compare_results({"cases": [broken]}, {"cases": [case("x", [100, 100])]}, spec=SPEC)["cases"][0]
    assert judged["verdict"] == "ok"
    generate = next(m for m in judged["metrics"] if m["metric"] == "generate_ms")
    assert generate["verdict"] == "n/a" and generate["note"].startswith("not compared: TypeError")


def test_results_that_cannot_be_judged_finish_as_an_error() -> None:
    batch = Batch(
        id=uuid.uuid4(),
        name="n",
        spec={**SPEC, "cases": [{"name": "x", "model": "m", "repeat": 1}]},
        environment={},
    )
    baseline = Batch(id=uuid.uuid4(), results={"cases": [{"no name": True}]}, environment={})
    outcome = judge(batch, {}, {}, baseline)
    assert outcome["verdict"] == "error" and "KeyError" in outcome["error"]
    assert [c["name"] for c in outcome["results"]["cases"]] == ["x"]


def test_the_drift_of_earlier_runs_is_kept_with_each_case_and_judged_by() -> None:
    """Each case keeps the medians of the spec's earlier good runs that did the same work and
    measured the same kind of figures; a compare (now, or later from the CLI) reads the drift there."""
    earlier = [
        {"cases": [case("x", [v, v + 1, v - 1]), case("y", [10.0, 10.0, 10.0], digest="other")]}
        for v in (1000.0, 1021.0, 985.0, 1012.0, 1040.0)
    ]
    earlier.append({"cases": [case("x", [5.0, 5.0, 5.0], figures="cold")]})  # other figures: skipped
    new = case("x", [1050, 1052, 1049])
    history = history_medians(new, earlier, spec=SPEC)
    assert history["generate_ms"] == [1000.0, 1021.0, 985.0, 1012.0, 1040.0]
    old = {"cases": [case("x", [1040, 1042, 1039])]}
    assert compare_results(old, {"cases": [new]}, spec=SPEC)["verdict"] == "passed"
    judged = compare_results(old, {"cases": [{**new, "history": history}]}, spec=SPEC)
    assert judged["verdict"] == "inconclusive" and gate_exit_code(judged) == 3
    (reason,) = judged["cases"][0]["reasons"]
    assert "from run to run (the last 5 good runs)" in reason
    text = render_comparison_text(judged, verbose=True)
    assert "drifts" in text and "from run to run" in text
