"""The arithmetic of nightly verdicts: a run's figure on the log scale, the variance of a median,
Student's t, Satterthwaite's degrees of freedom and a check that variances agree.

Pure Python (the API side imports neither numpy nor scipy), deterministic, and quick enough that
the calibration test (tests/nightly/test_calibration.py) puts tens of thousands of synthetic nights
through ``jobservice.nightly.verdicts`` in seconds.

Changes are relative, so every figure is compared on the log scale: a run of n repeats contributes
the median of the logs of its samples, n, and their sample variance (``RunStats``). The median of n
normal samples has the variance f(n) sigma^2 / n, where f(1) = f(2) = 1 and f(n) approaches pi / 2
(``median_variance_factor``, by numerical integration of the order statistics' densities).

``summarize`` and ``robust_sigma`` describe one run's raw samples in reports (the median, and the
Shamos estimate of the spread: 1.048 x the median of absolute pairwise differences, which one wild
repeat does not inflate).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

SHAMOS = 1.0483  # E|X - Y| for normal X, Y is 2 sigma / sqrt(pi); its median is 0.954 sigma
_NORMAL = statistics.NormalDist()
_GRID = 2001  # points of the numerical integration of a median's variance, over [-9, 9]


@dataclass(frozen=True)
class Summary:
    """Median and robust spread of one side's samples (raw units, for reports)."""

    n: int
    median: float | None
    sigma: float | None  # robust standard deviation (Shamos); None below two samples
    minimum: float | None
    maximum: float | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def pairwise_spreads(samples: Sequence[float]) -> list[float]:
    """Absolute differences of every pair of samples."""
    return [abs(a - b) for a, b in itertools.combinations(samples, 2)]


def robust_sigma(*groups: Sequence[float]) -> float | None:
    """Shamos estimate of the noise, pooling the within-group pairs of every group."""
    spreads = [d for group in groups for d in pairwise_spreads(group)]
    if not spreads:
        return None
    return SHAMOS * statistics.median(spreads)


def summarize(samples: Sequence[float]) -> Summary:
    """Median, robust sigma, min and max of raw samples."""
    if not samples:
        return Summary(n=0, median=None, sigma=None, minimum=None, maximum=None)
    return Summary(
        n=len(samples),
        median=round(statistics.median(samples), 4),
        sigma=None if len(samples) < 2 else round(robust_sigma(samples) or 0.0, 4),
        minimum=min(samples),
        maximum=max(samples),
    )


@dataclass(frozen=True)
class RunStats:
    """One run's figure of one metric on the log scale: what the history keeps of a night.

    ``median``: the median of the logs of its samples; ``var``: their sample variance (None with
    one sample); ``run``: the batch it came from (None for a synthetic one).
    """

    median: float
    n: int
    var: float | None
    run: str | None = None

    @property
    def factor(self) -> float:
        """f(n) / n: the variance of this run's median in units of the within-run variance."""
        return median_variance_factor(self.n) / self.n

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (kept in a night's results, so later comparisons can re-read it)."""
        return {"run": self.run, "median": self.median, "n": self.n, "var": self.var}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunStats:
        """The inverse of ``as_dict``."""
        var = data.get("var")
        return cls(
            median=float(data["median"]),
            n=int(data["n"]),
            var=None if var is None else float(var),
            run=data.get("run"),
        )


def run_stats(samples: Sequence[float], *, run: str | None = None) -> RunStats | None:
    """A run's ``RunStats`` from its raw samples; None when there are none or one is not positive
    (a log needs a positive figure: a zero device memory is judged by ``verdicts`` without it)."""
    if not samples or any(not (value > 0) for value in samples):
        return None
    logs = sorted(math.log(value) for value in samples)
    n, middle = len(logs), len(logs) // 2
    median = logs[middle] if n % 2 else (logs[middle - 1] + logs[middle]) / 2
    return RunStats(median=median, n=n, var=sample_variance(logs) if n > 1 else None, run=run)


def sample_variance(values: Sequence[float]) -> float:
    """The unbiased sample variance (floats throughout: ``statistics.variance`` works in exact
    fractions, a hundred times slower than the calibration can afford)."""
    mean = math.fsum(values) / len(values)
    return math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)


def pooled_variance(runs: Sequence[RunStats]) -> tuple[float | None, int]:
    """The within-run variance pooled over ``runs`` (weights n - 1) and its degrees of freedom."""
    squares, freedom = 0.0, 0
    for run in runs:
        if run.var is not None and run.n > 1:
            squares += run.var * (run.n - 1)
            freedom += run.n - 1
    return (squares / freedom if freedom else None), freedom


def mean_factor(runs: Sequence[RunStats]) -> float:
    """The mean of f(n) / n over ``runs``: the within-run part of their medians' variance."""
    return sum(run.factor for run in runs) / len(runs)


@lru_cache(maxsize=256)
def median_variance_factor(n: int) -> float:
    """f(n): the variance of the median of n standard normal samples, times n.

    1 for n = 1 and 2, 1.346 for 3, 1.193 for 4, 1.434 for 5, ..., pi / 2 as n grows. Computed by
    integrating the densities of the middle order statistics (Simpson's rule on [-9, 9]).
    """
    if n < 1:
        raise ValueError("a median needs at least one sample")
    if n <= 2:
        return 1.0
    if n > 400:  # indistinguishable from the limit at the precision any verdict needs
        return math.pi / 2
    k = n // 2
    xs, pdf, cdf = _grid()
    if n % 2 == 1:  # the (k+1)-th of n = 2k + 1
        second = _order_moment(xs, pdf, cdf, n, k + 1, power=2)
        return n * second
    # (X_k + X_k+1) / 2: both have the same second moment by symmetry (X_k+1 is -X_k mirrored)
    second = _order_moment(xs, pdf, cdf, n, k, power=2)
    cross = _adjacent_product(xs, pdf, cdf, n, k)
    return n * (2 * second + 2 * cross) / 4


@lru_cache(maxsize=1)
def _grid() -> tuple[list[float], list[float], list[float]]:
    step = 18.0 / (_GRID - 1)
    xs = [-9.0 + i * step for i in range(_GRID)]
    return xs, [_NORMAL.pdf(x) for x in xs], [_NORMAL.cdf(x) for x in xs]


def _simpson(values: Sequence[float], step: float) -> float:
    inner = sum(v * (4 if i % 2 else 2) for i, v in enumerate(values[1:-1], start=1))
    return step / 3 * (values[0] + values[-1] + inner)


def _log_choose(n: int, *parts: int) -> float:
    return math.lgamma(n + 1) - sum(math.lgamma(p + 1) for p in parts)


def _order_moment(
    xs: list[float], pdf: list[float], cdf: list[float], n: int, r: int, *, power: int
) -> float:
    """E[X_(r) ** power] of n standard normals."""
    log_c = _log_choose(n, r - 1, n - r)  # n! / ((r-1)! (n-r)!)
    values = []
    for x, p, c in zip(xs, pdf, cdf, strict=True):
        if p == 0.0 or c <= 0.0 or c >= 1.0:
            values.append(0.0)
            continue
        log_density = log_c + (r - 1) * math.log(c) + (n - r) * math.log1p(-c) + math.log(p)
        values.append(x**power * math.exp(log_density))
    return _simpson(values, xs[1] - xs[0])


def _adjacent_product(xs: list[float], pdf: list[float], cdf: list[float], n: int, r: int) -> float:
    """E[X_(r) X_(r+1)] of n standard normals: the joint density of two adjacent order statistics is
    n! / ((r-1)! (n-r-1)!) F(x)^(r-1) f(x) f(y) (1 - F(y))^(n-r-1) for x < y."""
    step = xs[1] - xs[0]
    log_c = _log_choose(n, r - 1, n - r - 1)
    upper = [
        y * p * math.exp((n - r - 1) * math.log1p(-c)) if 0.0 < c < 1.0 else 0.0
        for y, p, c in zip(xs, pdf, cdf, strict=True)
    ]
    # tail[i] = integral of upper from xs[i] to the end (trapezoids, accumulated from the top)
    tail = [0.0] * len(xs)
    for i in range(len(xs) - 2, -1, -1):
        tail[i] = tail[i + 1] + (upper[i] + upper[i + 1]) * step / 2
    values = [
        x * math.exp(log_c + (r - 1) * math.log(c)) * p * t if 0.0 < c < 1.0 else 0.0
        for x, p, c, t in zip(xs, pdf, cdf, tail, strict=True)
    ]
    return _simpson(values, step)


def satterthwaite(terms: Sequence[tuple[float, float]]) -> float:
    """Degrees of freedom of a sum of variance estimates ``(value, df)`` (Welch-Satterthwaite).
    A term with infinite df (a known variance) adds nothing to the denominator."""
    total = sum(value for value, _ in terms)
    spread = sum(value * value / df for value, df in terms if df > 0 and math.isfinite(df))
    if spread == 0.0:
        return math.inf
    return total * total / spread


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom (any positive real)."""
    if not math.isfinite(df) or df > 1e7:
        return 1.0 - _NORMAL.cdf(t)
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_pdf(t: float, df: float) -> float:
    """The density of Student's t."""
    if not math.isfinite(df) or df > 1e7:
        return _NORMAL.pdf(t)
    log_density = (
        math.lgamma((df + 1) / 2)
        - math.lgamma(df / 2)
        - 0.5 * math.log(df * math.pi)
        - (df + 1) / 2 * math.log1p(t * t / df)
    )
    return math.exp(log_density)


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (p in (0, 1), df > 0, not necessarily whole).

    Degrees of freedom are floored to 0.01 first (a Satterthwaite df is an estimate; flooring is
    the conservative side, and it lets the answers be cached: the calibration asks often).
    """
    if not 0.0 < p < 1.0:
        raise ValueError("p must be between 0 and 1")
    if df <= 0:
        raise ValueError("degrees of freedom must be positive")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if not math.isfinite(df) or df > 1e7:
        return _NORMAL.inv_cdf(p)
    return _t_upper(1.0 - p, max(0.01, math.floor(df * 100) / 100))


@lru_cache(maxsize=65536)
def _t_upper(q: float, df: float) -> float:
    """t with P(T > t) = q (q < 1/2): a Cornish-Fisher start, then safeguarded Newton steps."""
    z = _NORMAL.inv_cdf(1.0 - q)
    if df >= 4:  # the expansion in 1 / df of Abramowitz & Stegun 26.7.5
        z2 = z * z
        g1 = z * (z2 + 1) / 4
        g2 = z * ((5 * z2 + 16) * z2 + 3) / 96
        g3 = z * (((3 * z2 + 19) * z2 + 17) * z2 - 15) / 384
        guess = z + g1 / df + g2 / df**2 + g3 / df**3
    else:
        guess = z * 2
    low, high = 0.0, max(guess, 1.0)
    while t_sf(high, df) > q:
        low, high = high, high * 2
    t = min(max(guess, low), high)
    for _ in range(100):
        gap = t_sf(t, df) - q  # positive: t is too small
        if gap > 0:
            low = t
        else:
            high = t
        density = t_pdf(t, df)
        step = gap / density if density > 0 else math.inf
        candidate = t + step
        if not low < candidate < high:
            candidate = (low + high) / 2
        if abs(candidate - t) <= 1e-11 * max(1.0, abs(t)):
            return candidate
        t = candidate
    return t


def variances_agree(estimates: Sequence[tuple[float, float]], *, level: float = 0.01) -> bool:
    """Whether variance estimates ``(value, df)`` may share one value: Bartlett's test at ``level``
    (its chi-square tail by the Wilson-Hilferty approximation; a check, not a stated error rate)."""
    usable = [(value, df) for value, df in estimates if df > 0 and value > 0]
    if len(usable) < 2:
        return True
    total = sum(df for _, df in usable)
    pooled = sum(value * df for value, df in usable) / total
    statistic = total * math.log(pooled) - sum(df * math.log(value) for value, df in usable)
    correction = 1 + (sum(1 / df for _, df in usable) - 1 / total) / (3 * (len(usable) - 1))
    chi2, k = statistic / correction, len(usable) - 1
    z = ((chi2 / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 1.0 - _NORMAL.cdf(z) >= level
