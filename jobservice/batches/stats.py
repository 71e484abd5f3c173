"""Noise-aware comparison of repeated measurements: is the candidate's median really different?

A change is flagged only when it is larger than BOTH
  - a relative floor (default 3 %): smaller differences are not worth an alarm, and
  - ``k`` standard errors of the difference of the two medians (default k = 3), where the noise
    is estimated robustly from the repeats themselves.
The noise is the Shamos estimator (1.048 x the median of absolute pairwise differences within each
run, pooled over baseline and candidate): unlike a standard deviation one wild repeat does not
inflate it, and unlike the MAD it has no built-in zero with three repeats. The standard error of a
median is about 1.2533 sigma / sqrt(n), so the difference of two medians has
1.2533 sigma sqrt(1/n_b + 1/n_c). With no pair to estimate the noise from (one run on each side)
the floor is raised to ``few_samples_relative`` (10 %): a single sample says little.

Worked example (tests/batches/test_stats.py): generate times of 1000, 1008, 995 ms against 1050,
1043, 1058 ms: sigma ~ 8.4 ms, three standard errors ~ 2.6 %, so the 3 % floor applies and the
5 % slowdown is flagged; the same medians with ~3 % noise on each repeat are not.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Literal

SHAMOS = 1.0483  # E|X - Y| for normal X, Y is 2 sigma / sqrt(pi); its median is 0.954 sigma
MEDIAN_SE = 1.2533  # sqrt(pi / 2): standard error of a median relative to that of a mean

Verdict = Literal["regression", "improvement", "ok", "n/a"]


@dataclass(frozen=True)
class Summary:
    """Median and robust spread of one side's samples."""

    n: int
    median: float | None
    sigma: float | None  # robust standard deviation (Shamos); None below two samples
    minimum: float | None
    maximum: float | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def pairwise_spreads(samples: list[float]) -> list[float]:
    """Absolute differences of every pair of samples."""
    return [abs(a - b) for a, b in itertools.combinations(samples, 2)]


def robust_sigma(*groups: list[float]) -> float | None:
    """Shamos estimate of the noise, pooling the within-group pairs of every group."""
    spreads = [d for group in groups for d in pairwise_spreads(group)]
    if not spreads:
        return None
    return SHAMOS * statistics.median(spreads)


def summarize(samples: list[float]) -> Summary:
    """Median, robust sigma, min and max."""
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
class Comparison:
    """The verdict on one metric of one case."""

    verdict: Verdict
    baseline: float | None
    candidate: float | None
    change: float | None  # relative change of the median, candidate vs baseline (+ = larger)
    threshold: float | None  # the relative change that had to be exceeded
    n_baseline: int
    n_candidate: int
    sigma: float | None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def compare_samples(
    baseline: list[float],
    candidate: list[float],
    *,
    better: Literal["lower", "higher"],
    relative: float = 0.03,
    k: float = 3.0,
    few_samples_relative: float = 0.10,
) -> Comparison:
    """Compare the medians of two sets of repeats, flagging only changes above the noise."""
    nb, nc = len(baseline), len(candidate)
    if not baseline or not candidate:
        side = "baseline" if not baseline else "candidate"
        return Comparison(
            "n/a", _median(baseline), _median(candidate), None, None, nb, nc, None, f"no {side} samples"
        )
    mb, mc = statistics.median(baseline), statistics.median(candidate)
    sigma = robust_sigma(baseline, candidate)
    if mb == 0:
        verdict: Verdict = (
            "ok" if mc == 0 else ("regression" if (mc > 0) == (better == "lower") else "improvement")
        )
        return Comparison(verdict, mb, mc, None, None, nb, nc, sigma, "baseline median is zero")
    change = (mc - mb) / abs(mb)
    note = ""
    if sigma is None:
        threshold = max(relative, few_samples_relative)
        note = "one run per side: the noise is unknown, so only large changes count"
    else:
        noise = k * MEDIAN_SE * sigma * math.sqrt(1 / nb + 1 / nc) / abs(mb)
        threshold = max(relative, noise)
        if noise > relative:
            note = f"noisy: {k:g} standard errors are {noise:.1%}"
    worse = change > threshold if better == "lower" else change < -threshold
    better_now = change < -threshold if better == "lower" else change > threshold
    verdict = "regression" if worse else ("improvement" if better_now else "ok")
    return Comparison(
        verdict,
        round(mb, 4),
        round(mc, 4),
        round(change, 5),
        round(threshold, 5),
        nb,
        nc,
        None if sigma is None else round(sigma, 4),
        note,
    )


def _median(samples: list[float]) -> float | None:
    return round(statistics.median(samples), 4) if samples else None
