"""The decided procedure (issue 36) on hand-made histories: the statistic, its degrees of freedom,
the three verdicts with their bounds, the cold start, episodes, and the looks of adaptive repeats."""

from __future__ import annotations

import math

import pytest

from jobservice.nightly.stats import RunStats, median_variance_factor, t_quantile
from jobservice.nightly.verdicts import (
    ALPHA,
    EPISODE_SHARE,
    Drift,
    VerdictLimits,
    assumed_drift_for,
    decider,
    explain,
    judge_metric,
    look_levels,
    next_look,
    zero_baseline,
)

# 20 nights whose medians wander by about 1 % (log scale), each of 3 repeats with 0.5 % noise.
WANDER = [0.012, -0.008, 0.004, -0.015, 0.009, 0.0, -0.004, 0.013, -0.011, 0.0] * 2  # mean 0
QUIET = 0.005**2


def history(offsets: list[float] = WANDER, *, n: int = 3, var: float = QUIET) -> list[RunStats]:
    return [RunStats(math.log(1000.0) + d, n, var, run=f"r{i}") for i, d in enumerate(offsets)]


def tonight(change: float, *, n: int = 3, var: float = QUIET) -> RunStats:
    mean = sum(WANDER) / len(WANDER)
    return RunStats(math.log(1000.0) + mean + math.log1p(change), n, var, run="tonight")


def omega2(runs: list[RunStats]) -> float:
    mean = sum(r.median for r in runs) / len(runs)
    return sum((r.median - mean) ** 2 for r in runs) / (len(runs) - 1)


def test_the_statistic_with_as_many_repeats_as_the_history() -> None:
    """V = (1 + 1/K) ω² when tonight's n is the history's; the degrees of freedom are K - 1."""
    ref = history()
    result = judge_metric([tonight(0.02)], ref, better="lower", limits=VerdictLimits())
    v = (1 + 1 / 20) * omega2(ref)
    assert result.df == 19 and result.reference_runs == 20 and result.mode == "history"
    assert result.change == pytest.approx(0.02, abs=1e-5)
    t_reg = t_quantile(1 - ALPHA, 19)
    assert result.detectable == pytest.approx(
        math.expm1(max(t_reg * math.sqrt(v), math.log1p(0.03))), abs=1e-5
    )
    t_ok = t_quantile(1 - 0.01, 19)
    assert result.upper == pytest.approx(math.expm1(math.log1p(0.02) + t_ok * math.sqrt(v)), abs=1e-5)
    assert result.alpha == ALPHA and result.alpha_ok == 0.01 and result.ok_within == 0.04


def test_more_repeats_tonight_subtract_their_noise_down_to_the_floor() -> None:
    """Tonight's median of 12 is steadier than the history's of 3: V loses (f(3)/3 - f(12)/12) s²,
    but never goes below ω²/K + f(12)/12 s², and the df come from Satterthwaite."""
    noisy = 0.03**2
    ref = history(var=noisy)
    result = judge_metric([tonight(0.0, n=12, var=noisy)], ref, better="lower", limits=VerdictLimits())
    w = omega2(ref)
    b = median_variance_factor(12) / 12 - median_variance_factor(3) / 3
    v = max((1 + 1 / 20) * w + b * noisy, w / 20 + median_variance_factor(12) / 12 * noisy)
    t_ok = t_quantile(1 - 0.01, result.df or math.inf)
    assert result.upper == pytest.approx(math.expm1(t_ok * math.sqrt(v)), abs=2e-5)
    assert result.df is not None and result.df != 19


def test_a_quiet_history_calls_unchanged_ok_and_15pc_a_regression() -> None:
    ref = history()
    same = judge_metric([tonight(0.0)], ref, better="lower", limits=VerdictLimits())
    assert same.verdict == "ok" and same.upper is not None and same.upper < 0.04
    text = explain("generate time", same)
    assert "a worsening of 4% or more is ruled out with 99 % confidence" in text
    slow = judge_metric([tonight(0.15)], ref, better="lower", limits=VerdictLimits())
    assert slow.verdict == "regression"
    assert explain("generate time", slow).startswith("generate time +15.0% (a regression needs +")
    assert explain("generate time", slow).endswith(f"{slow.detectable:+.1%} at α = 0.1 %)")
    faster = judge_metric([tonight(-0.15)], ref, better="lower", limits=VerdictLimits())
    assert faster.verdict == "improvement"


def test_a_change_under_the_floor_is_never_a_regression() -> None:
    """Very quiet nights: 2 % is far beyond the noise, but under the 3 % floor: not a regression
    (and, its bound above 4 % or not, never called a regression)."""
    still = [0.0001 * (i % 3) for i in range(20)]
    ref = history(still, var=1e-8)
    result = judge_metric([tonight(0.02, var=1e-8)], ref, better="lower", limits=VerdictLimits())
    assert result.verdict == "ok"
    result = judge_metric([tonight(0.035, var=1e-8)], ref, better="lower", limits=VerdictLimits())
    assert result.verdict == "regression"


def test_higher_is_better_flips_the_sign() -> None:
    ref = history()
    drop = judge_metric([tonight(-0.15)], ref, better="higher", limits=VerdictLimits())
    assert drop.verdict == "regression" and drop.upper is not None and drop.upper < 0
    rise = judge_metric([tonight(0.15)], ref, better="higher", limits=VerdictLimits())
    assert rise.verdict == "improvement"


def test_an_unsure_night_says_what_it_cannot_rule_out_and_what_would_decide_it() -> None:
    # Within-run noise limits: more repeats would decide.
    noisy = 0.05**2
    ref = history(var=noisy)
    result = judge_metric([tonight(0.0, var=noisy)], ref, better="lower", limits=VerdictLimits())
    assert (
        result.verdict == "inconclusive" and result.repeats_needed is not None and result.repeats_needed > 3
    )
    assert not result.drift_limits and result.nights_needed is None
    assert decider(result) == f"{result.repeats_needed} repeats would decide it"
    assert f"up to {result.upper:+.1%} not ruled out" in explain("generate time", result)
    # The drift between nights limits: repeats cannot help, nights pooled in an episode can.
    drifting = [2 * d for d in WANDER]
    ref = history(drifting)
    result = judge_metric([tonight(0.06)], ref, better="lower", limits=VerdictLimits())
    assert result.verdict == "inconclusive" and result.drift_limits and result.repeats_needed is None
    assert result.episode_open and result.nights_needed is not None
    assert "pooled would decide it" in decider(result)
    # The same drift and no change: no episode opens, so nothing but less noise decides it.
    result = judge_metric([tonight(0.0)], ref, better="lower", limits=VerdictLimits())
    assert result.verdict == "inconclusive" and not result.episode_open and result.nights_needed is None
    assert decider(result).endswith("reduce the noise")


def test_the_cold_start_assumes_the_drift_of_the_device() -> None:
    assert assumed_drift_for("cpu") == 0.02 and assumed_drift_for(None) == 0.02
    assert assumed_drift_for("cuda:0") == 0.005 and assumed_drift_for("npu:2,3") == 0.005
    base = [RunStats(math.log(1000.0), 3, 1e-6)]
    slower = [RunStats(math.log(1050.0), 3, 1e-6)]
    card = judge_metric(slower, base, better="lower", limits=VerdictLimits(assumed_drift=0.005))
    assert card.verdict == "regression" and card.mode == "cold_start" and card.drift_source == "assumed"
    cpu = judge_metric(slower, base, better="lower", limits=VerdictLimits(assumed_drift=0.02))
    # V = 2 τ0² + (f(3)/3 + f(3)/3) s²: 5 % is within what two runs 2 % apart each can show
    v = 2 * 0.02**2 + 2 * median_variance_factor(3) / 3 * 1e-6
    assert cpu.verdict == "inconclusive"
    assert cpu.detectable == pytest.approx(
        math.expm1(t_quantile(1 - ALPHA, cpu.df or math.inf) * math.sqrt(v)), abs=1e-4
    )
    assert not cpu.episode_open, "episodes start once a case has a history"


def test_one_run_a_side_states_no_error_rate() -> None:
    one = [RunStats(math.log(1000.0), 1, None)]
    small = judge_metric([RunStats(math.log(1040.0), 1, None)], one, better="lower", limits=VerdictLimits())
    assert small.verdict == "inconclusive" and small.mode == "one_run" and small.upper is None
    assert "run at least 2 repeats" in explain("generate time", small)
    big = judge_metric([RunStats(math.log(1200.0), 1, None)], one, better="lower", limits=VerdictLimits())
    assert big.verdict == "regression" and "no error rate can be stated" in explain("generate time", big)


def test_a_zero_reference_is_judged_on_the_medians() -> None:
    assert zero_baseline([0, 0, 0], [0, 5, 5], better="lower").verdict == "regression"
    assert zero_baseline([0, 0], [0, 0], better="lower").verdict == "ok"


def test_an_episode_pools_its_nights_at_a_sixth_of_alpha_and_closes_after_four() -> None:
    drifting = [3 * d for d in WANDER]
    ref = history(drifting)
    first = judge_metric([tonight(0.045)], ref, better="lower", limits=VerdictLimits())
    assert first.verdict == "inconclusive" and first.episode_open and first.alpha == ALPHA
    nights = [tonight(0.045), tonight(0.05)]
    second = judge_metric(nights, ref, better="lower", limits=VerdictLimits())
    assert second.nights == 2 and second.alpha == pytest.approx(ALPHA * EPISODE_SHARE)
    assert second.alpha_ok == pytest.approx(0.01 * EPISODE_SHARE)
    assert second.change == pytest.approx(math.expm1((math.log1p(0.045) + math.log1p(0.05)) / 2), abs=1e-4)
    assert second.tonight_change == pytest.approx(0.05, abs=1e-5)
    # Pooling halves the drift's part of V: the detectable change shrinks.
    assert (
        second.detectable is not None
        and first.detectable is not None
        and second.detectable < first.detectable
    )
    fourth = judge_metric([tonight(0.035)] * 4, ref, better="lower", limits=VerdictLimits())
    assert fourth.nights == 4 and not fourth.episode_open, "after four nights it closes, whatever it says"
    six = judge_metric([tonight(0.08)] * 3, ref, better="lower", limits=VerdictLimits())
    assert six.verdict == "regression" and "over 3 nights" in explain("generate time", six)


def test_looks_split_alpha_and_stop_on_futility() -> None:
    assert look_levels(3) == [3, 6, 12] and look_levels(20) == [20, 40, 50]
    noisy = 0.03**2
    ref = history(var=noisy)
    drift = Drift(omega2(ref), 40, "pooled", 41)
    result = judge_metric(
        [tonight(0.0, var=noisy)], ref, better="lower", limits=VerdictLimits(looks=3), drift=drift
    )
    assert result.alpha == pytest.approx(ALPHA / 3) and result.alpha_ok == pytest.approx(0.01 / 3)
    assert result.df is not None and result.df > 19, "the pooled drift's df"
    assert result.verdict == "inconclusive" and result.repeats_needed is not None
    assert 6 <= result.repeats_needed <= 12
    assert next_look(result, repeat=3, level=3) == 6
    assert next_look(result, repeat=3, level=6) == 12
    assert next_look(result, repeat=3, level=12) is None, "the last look"
    futile = {**result.as_dict(), "repeats_needed": 30}
    assert next_look(futile, repeat=3, level=3) is None, "even 12 could not decide: stop"
    alone = judge_metric([tonight(0.0, var=noisy)], ref, better="lower", limits=VerdictLimits())
    assert next_look(alone, repeat=3, level=3) is None, "one look when the drift is not known well enough"
