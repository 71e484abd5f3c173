"""Noise-aware comparison on synthetic samples: real slowdowns are flagged, ordinary jitter is not."""

from __future__ import annotations

import random

import pytest

from jobservice.batches.stats import compare_samples, robust_sigma, summarize


def noisy(median: float, spread: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [median * (1 + rng.gauss(0, spread)) for _ in range(n)]


def test_worked_example_five_percent_slowdown_is_flagged() -> None:
    result = compare_samples([1000, 1008, 995], [1050, 1043, 1058], better="lower")
    assert result.verdict == "regression"
    assert result.change == pytest.approx(0.05)
    assert result.threshold == pytest.approx(0.03), "low noise: the 3 % floor is the threshold"


def test_same_medians_with_three_percent_noise_are_not_flagged() -> None:
    result = compare_samples([1000, 1030, 970], [1050, 1080, 1020], better="lower")
    assert result.verdict == "ok"
    assert result.threshold is not None and result.threshold > 0.05
    assert "noisy" in result.note


@pytest.mark.parametrize("seed", range(40))
def test_ordinary_jitter_raises_no_alarm(seed: int) -> None:
    """1 % noise per repeat, no change: never a regression over many random draws."""
    base, cand = noisy(1000, 0.01, 3, seed), noisy(1000, 0.01, 3, seed + 1000)
    assert compare_samples(base, cand, better="lower").verdict == "ok"


@pytest.mark.parametrize("seed", range(40))
def test_a_real_five_percent_slowdown_with_low_noise_is_always_flagged(seed: int) -> None:
    base, cand = noisy(1000, 0.003, 5, seed), noisy(1050, 0.003, 5, seed + 1000)
    assert compare_samples(base, cand, better="lower").verdict == "regression"


def test_one_wild_repeat_neither_hides_nor_fakes_a_change() -> None:
    # An outlier in the candidate: the median and the pairwise-median noise both ignore it.
    assert compare_samples([100, 101, 99], [100, 250, 100.5], better="lower").verdict == "ok"
    assert compare_samples([100, 101, 99, 100], [110, 400, 111, 109], better="lower").verdict == "regression"


def test_higher_is_better_metrics_flag_a_drop() -> None:
    assert compare_samples([30.0, 30.2, 29.9], [27.0, 27.1, 26.9], better="higher").verdict == "regression"
    assert compare_samples([30.0, 30.2, 29.9], [33.0, 33.1, 32.9], better="higher").verdict == "improvement"
    assert compare_samples([100, 101, 99], [90, 91, 89], better="lower").verdict == "improvement"


def test_single_samples_need_a_large_change() -> None:
    small = compare_samples([1000], [1060], better="lower")
    assert small.verdict == "ok" and small.threshold == pytest.approx(0.10) and "unknown" in small.note
    assert compare_samples([1000], [1200], better="lower").verdict == "regression"


def test_missing_samples_are_not_applicable() -> None:
    result = compare_samples([], [5.0], better="lower")
    assert result.verdict == "n/a" and "baseline" in result.note


def test_summary_and_sigma() -> None:
    assert robust_sigma([1.0]) is None
    summary = summarize([10.0, 12.0, 11.0])
    assert summary.median == 11.0 and summary.n == 3 and summary.minimum == 10.0 and summary.sigma
    assert summarize([]).median is None
