"""The arithmetic of verdicts: a median's variance, Student's t, Satterthwaite, Bartlett, run stats."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from jobservice.nightly.stats import (
    RunStats,
    betainc,
    median_variance_factor,
    pooled_variance,
    robust_sigma,
    run_stats,
    satterthwaite,
    summarize,
    t_quantile,
    t_sf,
    variances_agree,
)


@pytest.mark.parametrize(
    ("n", "factor"),
    # n x Var(median of n standard normals), from the order statistics' tables
    [(1, 1.0), (2, 1.0), (3, 1.3463), (4, 1.1930), (5, 1.4342), (6, 1.2886), (7, 1.4733)],
)
def test_the_variance_of_a_median(n: int, factor: float) -> None:
    assert median_variance_factor(n) == pytest.approx(factor, abs=5e-4)


def test_the_variance_of_a_median_approaches_pi_over_two_and_agrees_with_a_simulation() -> None:
    assert median_variance_factor(201) == pytest.approx(math.pi / 2, rel=0.01)
    assert median_variance_factor(1000) == math.pi / 2
    rng = random.Random(3)
    medians = [statistics.median(rng.gauss(0, 1) for _ in range(9)) for _ in range(20000)]
    assert statistics.pvariance(medians) * 9 == pytest.approx(median_variance_factor(9), rel=0.03)


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [  # printed tables of Student's t
        (0.975, 10, 2.228139),
        (0.99, 4, 3.746947),
        (0.999, 19, 3.579400),
        (0.995, 1, 63.656741),
        (0.9995, 2, 31.599055),
        (0.95, 120, 1.657651),
    ],
)
def test_t_quantiles_match_the_tables(p: float, df: float, expected: float) -> None:
    assert t_quantile(p, df) == pytest.approx(expected, rel=1e-6)
    assert t_quantile(1 - p, df) == pytest.approx(-expected, rel=1e-6)


@pytest.mark.parametrize("df", [0.7, 2.35, 7.5, 19.37, 57.0, 4000.0])
@pytest.mark.parametrize("q", [0.2, 0.01, 0.001 / 3, 0.001 / 18])
def test_t_quantiles_invert_the_tail_for_any_real_df(df: float, q: float) -> None:
    t = t_quantile(1 - q, df)
    floored = math.floor(df * 100) / 100
    assert t_sf(t, floored) == pytest.approx(q, rel=1e-7)


def test_the_incomplete_beta_and_large_df() -> None:
    assert betainc(2, 3, 0.4) == pytest.approx(0.5248, abs=1e-4)
    assert betainc(1, 1, 0.3) == pytest.approx(0.3)
    assert t_quantile(0.999, math.inf) == pytest.approx(statistics.NormalDist().inv_cdf(0.999))


def test_satterthwaite_degrees_of_freedom() -> None:
    assert satterthwaite([(2.0, 19)]) == pytest.approx(19)
    assert satterthwaite([(1.0, 10), (1.0, 10)]) == pytest.approx(20)
    assert satterthwaite([(1.0, 19), (0.0, 40)]) == pytest.approx(19)
    assert satterthwaite([(1.0, math.inf), (1.0, 4)]) == pytest.approx(16)
    assert satterthwaite([(1.0, math.inf)]) == math.inf


def test_bartlett_accepts_alike_variances_and_refuses_different_ones() -> None:
    assert variances_agree([(1.0, 19), (1.3, 19), (0.8, 19)])
    assert not variances_agree([(1.0, 19), (6.0, 19)])
    assert variances_agree([(1.0, 19)])


def test_a_run_on_the_log_scale() -> None:
    stats = run_stats([100.0, 110.0, 105.0], run="b1")
    assert stats is not None and stats.run == "b1" and stats.n == 3
    assert stats.median == pytest.approx(math.log(105.0))
    assert stats.var == pytest.approx(statistics.variance([math.log(v) for v in (100.0, 110.0, 105.0)]))
    assert stats.factor == pytest.approx(median_variance_factor(3) / 3)
    assert run_stats([100.0]) == RunStats(median=math.log(100.0), n=1, var=None)
    assert run_stats([100.0, 0.0]) is None and run_stats([]) is None, "a log needs positive figures"
    even = run_stats([100.0, 121.0])
    assert even is not None and math.exp(even.median) == pytest.approx(110.0)
    assert RunStats.from_dict(stats.as_dict()) == stats


def test_the_within_run_variance_pools_over_runs_with_their_freedom() -> None:
    runs = [RunStats(0.0, 3, 0.01), RunStats(0.0, 5, 0.02), RunStats(0.0, 1, None)]
    variance, df = pooled_variance(runs)
    assert df == 6 and variance == pytest.approx((0.01 * 2 + 0.02 * 4) / 6)
    assert pooled_variance([RunStats(0.0, 1, None)]) == (None, 0)


def test_summary_and_robust_sigma_of_raw_samples() -> None:
    assert robust_sigma([1.0]) is None
    summary = summarize([10.0, 12.0, 11.0])
    assert summary.median == 11.0 and summary.n == 3 and summary.minimum == 10.0 and summary.sigma
    assert summarize([]).median is None
