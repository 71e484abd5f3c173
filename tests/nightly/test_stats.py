"""Noise-aware comparison on synthetic samples: real slowdowns are flagged, ordinary jitter is not."""

from __future__ import annotations

import math
import random

import pytest

from jobservice.nightly.stats import MEDIAN_SE, compare_samples, inconclusive_reason, robust_sigma, summarize


def noisy(median: float, spread: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [median * (1 + rng.gauss(0, spread)) for _ in range(n)]


def test_worked_example_five_percent_slowdown_is_flagged() -> None:
    result = compare_samples([1000, 1008, 995], [1050, 1043, 1058], better="lower")
    assert result.verdict == "regression"
    assert result.change == pytest.approx(0.05)
    assert result.threshold == pytest.approx(0.03), "low noise: the 3 % floor is the threshold"


def test_a_change_hidden_by_three_percent_noise_is_inconclusive_not_ok() -> None:
    """The worked example of stats.py: 5 % slower, but 3 standard errors are 9.7 %: the run cannot
    say there is no regression, and it says how many repeats could."""
    result = compare_samples([1000, 1030, 970], [1050, 1080, 1020], better="lower")
    assert result.verdict == "inconclusive"
    assert result.threshold == result.detectable == pytest.approx(0.0966, abs=1e-3)
    assert result.floor == 0.03 and result.repeats_needed == 32
    assert "noisy" in result.note
    assert result.sigma is not None
    # At 32 repeats per side the same noise gives 3 standard errors of at most the floor.
    assert (
        3 * MEDIAN_SE * result.sigma * math.sqrt(2 / 32) / 1000
        <= 0.03
        < (3 * MEDIAN_SE * result.sigma * math.sqrt(2 / 31) / 1000)
    )
    text = inconclusive_reason("generate time", result)
    assert text == (
        "generate time: this run could not tell a change under 9.7% from noise (floor 3.0%); "
        "32 repeats per side would see 3.0%"
    )


def test_more_repeats_than_a_spec_allows_says_reduce_the_noise() -> None:
    result = compare_samples([1000, 1200, 800], [1000, 1150, 850], better="lower")
    assert result.verdict == "inconclusive" and result.repeats_needed is not None
    assert result.repeats_needed > 50 and "reduce the noise" in inconclusive_reason("x", result)


def test_quiet_unchanged_runs_are_ok() -> None:
    result = compare_samples([1000, 1002, 999], [1001, 998, 1000], better="lower")
    assert result.verdict == "ok" and result.detectable is not None and result.detectable < 0.03
    assert result.repeats_needed is None


@pytest.mark.parametrize("seed", range(40))
def test_ordinary_jitter_raises_no_alarm(seed: int) -> None:
    """1 % noise per repeat, no change: never a regression over many random draws (with three
    repeats 1 % noise sits at the edge of the 3 % floor: ok or inconclusive)."""
    base, cand = noisy(1000, 0.01, 3, seed), noisy(1000, 0.01, 3, seed + 1000)
    assert compare_samples(base, cand, better="lower").verdict in ("ok", "inconclusive")


@pytest.mark.parametrize("seed", range(40))
def test_a_five_percent_slowdown_in_noise_is_never_called_ok(seed: int) -> None:
    """3 % noise per repeat hides a 5 % slowdown at three repeats: regression or inconclusive, never ok."""
    base, cand = noisy(1000, 0.03, 3, seed), noisy(1050, 0.03, 3, seed + 1000)
    assert compare_samples(base, cand, better="lower").verdict in ("regression", "inconclusive")


@pytest.mark.parametrize("seed", range(40))
def test_a_real_five_percent_slowdown_with_low_noise_is_always_flagged(seed: int) -> None:
    base, cand = noisy(1000, 0.003, 5, seed), noisy(1050, 0.003, 5, seed + 1000)
    assert compare_samples(base, cand, better="lower").verdict == "regression"


def test_one_wild_repeat_neither_hides_nor_fakes_a_change() -> None:
    # An outlier in the candidate: the median and the pairwise-median noise both ignore it.
    assert compare_samples([100, 101, 99], [100, 250, 100.5], better="lower").verdict in (
        "ok",
        "inconclusive",
    )
    assert compare_samples([100, 101, 99, 100], [110, 400, 111, 109], better="lower").verdict == "regression"


def test_higher_is_better_metrics_flag_a_drop() -> None:
    assert compare_samples([30.0, 30.2, 29.9], [27.0, 27.1, 26.9], better="higher").verdict == "regression"
    assert compare_samples([30.0, 30.2, 29.9], [33.0, 33.1, 32.9], better="higher").verdict == "improvement"
    assert compare_samples([100, 101, 99], [90, 91, 89], better="lower").verdict == "improvement"


def test_single_samples_need_a_large_change() -> None:
    small = compare_samples([1000], [1060], better="lower")
    assert (
        small.verdict == "inconclusive" and small.threshold == pytest.approx(0.10) and "unknown" in small.note
    )
    assert small.detectable is None and small.repeats_needed is None
    assert compare_samples([1000], [1200], better="lower").verdict == "regression"


def test_missing_samples_are_not_applicable() -> None:
    result = compare_samples([], [5.0], better="lower")
    assert result.verdict == "n/a" and "baseline" in result.note


def test_summary_and_sigma() -> None:
    assert robust_sigma([1.0]) is None
    summary = summarize([10.0, 12.0, 11.0])
    assert summary.median == 11.0 and summary.n == 3 and summary.minimum == 10.0 and summary.sigma
    assert summarize([]).median is None


def test_a_run_that_drifted_as_a_whole_is_inconclusive_when_the_history_shows_drift() -> None:
    """Issue 25's miss: the baseline run was ~4 % slow as a whole (its repeats quiet), so a 5 %
    slower model measured +1 % and was called ok. The spec's earlier runs show how far its median
    moves from run to run; a change under k sqrt(2) of that cannot be told from it."""
    baseline: list[float] = [1040, 1042, 1039]
    candidate: list[float] = [1050, 1052, 1049]
    assert compare_samples(baseline, candidate, better="lower").verdict == "ok"
    history = [1000.0, 1021.0, 985.0, 1012.0, 1040.0]
    result = compare_samples(baseline, candidate, better="lower", history=history)
    assert result.verdict == "inconclusive" and result.drift_limits
    assert result.drift is not None and result.drift_runs == 5
    assert result.detectable == pytest.approx(3 * math.sqrt(2) * result.drift, abs=1e-4)
    assert result.repeats_needed is None, "more repeats cannot shrink a drift between runs"
    assert "more repeats in one run cannot shrink" in inconclusive_reason("generate time", result)
    # A 15 % slowdown is larger than the drift allows: still a regression.
    slow = compare_samples(baseline, [1200, 1203, 1198], better="lower", history=history)
    assert slow.verdict == "regression"


def test_a_history_shorter_than_three_runs_or_quiet_changes_nothing() -> None:
    baseline: list[float] = [1000, 1008, 995]
    candidate: list[float] = [1050, 1043, 1058]
    assert compare_samples(baseline, candidate, better="lower", history=[1000.0, 1040.0]).drift is None
    quiet = compare_samples(baseline, candidate, better="lower", history=[1000.0, 1001.0, 999.0, 1000.0])
    assert quiet.verdict == "regression" and not quiet.drift_limits


@pytest.mark.parametrize("seed", range(40))
def test_with_a_drift_between_runs_a_five_percent_slowdown_is_never_called_ok(seed: int) -> None:
    """Each run's median moves by 2 % (sigma) as a whole, its three repeats by 0.5 %: with six
    earlier runs to read the drift from, a 5 % slower run is regression or inconclusive, never ok,
    and an unchanged one is never a regression."""
    rng = random.Random(seed)

    def run(scale: float) -> list[float]:
        return noisy(1000 * scale * (1 + rng.gauss(0, 0.02)), 0.005, 3, rng.randrange(10**6))

    history = [sorted(run(1.0))[1] for _ in range(6)]
    baseline = run(1.0)
    assert compare_samples(baseline, run(1.05), better="lower", history=history).verdict != "ok"
    assert compare_samples(baseline, run(1.0), better="lower", history=history).verdict != "regression"
