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

Three verdicts, not two. ``k`` standard errors are also the smallest change the run could have
told from noise (``detectable``). When that is larger than the floor, a change below it is not
"ok" but ``inconclusive``: the run could not have seen a regression between the floor and
``detectable``, and ``repeats_needed`` says how many repeats per side would bring ``detectable``
under the floor at the noise measured (the standard error shrinks as 1/sqrt(n)). With one run per
side the noise is unknown, so anything short of the few-samples floor is inconclusive too.

Repeats within one run do not see what moves a whole run: a host that is slower tonight than last
night (another tenant's work, thermal state, a busy neighbour VM) shifts every repeat of a batch
alike. When the spec has a history (``drift``: the robust sigma of the medians of its earlier
good runs, at least ``DRIFT_MIN_RUNS``), the difference of two runs' medians also varies by
sqrt(2) x that sigma, and a run cannot detect less than ``k`` of those either: ``detectable`` is
the larger of the two. More repeats cannot shrink the drift, so when it is what limits a run,
``repeats_needed`` is None and the reason says so.

Worked example (tests/nightly/test_stats.py): generate times of 1000, 1008, 995 ms against 1050,
1043, 1058 ms: sigma ~ 8.4 ms, three standard errors ~ 2.6 %, so the 3 % floor applies and the
5 % slowdown is flagged; the same medians with ~3 % noise on each repeat could only have seen a
change above 9.7 %: inconclusive, and 32 repeats per side would see 3 %.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Literal

SHAMOS = 1.0483  # E|X - Y| for normal X, Y is 2 sigma / sqrt(pi); its median is 0.954 sigma
MEDIAN_SE = 1.2533  # sqrt(pi / 2): standard error of a median relative to that of a mean

Verdict = Literal["regression", "improvement", "ok", "inconclusive", "n/a"]
MAX_REPEATS = 50  # what a spec allows per case (jobservice.nightly.spec)
DRIFT_MIN_RUNS = 3  # earlier runs' medians needed before their spread counts


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
    # The smallest relative change this run could tell from its noise (k standard errors); None
    # when the noise is unknown (one run per side) or there was nothing to compare.
    detectable: float | None = None
    floor: float | None = None  # the spec's smallest change worth flagging
    repeats_needed: int | None = None  # per side, to bring ``detectable`` under the floor
    # The spread of the spec's earlier runs' medians (relative robust sigma) and how many runs it
    # rests on, when it was known; ``drift_limits``: it, not the repeats' noise, set ``detectable``.
    drift: float | None = None
    drift_runs: int | None = None
    drift_limits: bool = False

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def repeats_for(sigma: float, median: float, *, floor: float, k: float) -> int | None:
    """Repeats per side (baseline and candidate alike) whose ``k`` standard errors of the difference
    of the medians stay within ``floor`` of ``median`` at noise ``sigma``; None if no number can."""
    if floor <= 0 or median == 0:
        return None
    if sigma <= 0:
        return 2
    return max(2, math.ceil(2 * (k * MEDIAN_SE * sigma / (floor * abs(median))) ** 2))


def compare_samples(
    baseline: list[float],
    candidate: list[float],
    *,
    better: Literal["lower", "higher"],
    relative: float = 0.03,
    k: float = 3.0,
    few_samples_relative: float = 0.10,
    history: list[float] | None = None,
) -> Comparison:
    """Compare the medians of two sets of repeats: a regression or improvement beyond the noise,
    ``ok`` when the run could have seen a change of ``relative``, else ``inconclusive``.
    ``history``: the medians of the spec's earlier good runs of the same case (the drift)."""
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
    detectable: float | None = None
    drift = drift_of(history or [], mb)
    drift_limits = False
    if sigma is None:
        threshold = max(relative, few_samples_relative)
        note = "one run per side: the noise is unknown, so only large changes count"
    else:
        detectable = k * MEDIAN_SE * sigma * math.sqrt(1 / nb + 1 / nc) / abs(mb)
        note = f"noisy: {k:g} standard errors are {detectable:.1%}" if detectable > relative else ""
        if drift is not None and k * math.sqrt(2) * drift > max(detectable, relative):
            detectable = k * math.sqrt(2) * drift
            drift_limits = True
            runs = len(history or [])
            note = f"drifts: its median moved by {drift:.1%} (sigma) between the last {runs} runs"
        threshold = max(relative, detectable)
    worse = change > threshold if better == "lower" else change < -threshold
    better_now = change < -threshold if better == "lower" else change > threshold
    blind = detectable is None or detectable > relative  # it could not have seen a change of ``relative``
    verdict = "inconclusive" if blind else "ok"
    if worse or better_now:
        verdict = "regression" if worse else "improvement"
    needed = None
    if verdict == "inconclusive" and sigma is not None and not drift_limits:
        needed = repeats_for(sigma, mb, floor=relative, k=k)
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
        detectable=None if detectable is None else round(detectable, 5),
        floor=relative,
        repeats_needed=needed,
        drift=None if drift is None else round(drift, 5),
        drift_runs=len(history or []) if drift is not None else None,
        drift_limits=drift_limits,
    )


def drift_of(medians: list[float], reference: float) -> float | None:
    """The robust sigma of earlier runs' medians relative to ``reference``; None below
    ``DRIFT_MIN_RUNS`` of them."""
    if len(medians) < DRIFT_MIN_RUNS or reference == 0:
        return None
    sigma = robust_sigma(medians)
    return None if sigma is None else sigma / abs(reference)


def inconclusive_reason(label: str, result: Comparison) -> str:
    """Why a metric's comparison cannot tell: what it could have seen, and what would let it."""
    floor = f"{result.floor:.1%}" if result.floor is not None else "the floor"
    if result.detectable is None:
        return (
            f"{label}: one run per side, so the noise is unknown and only a change over "
            f"{result.threshold or 0:.0%} would show; run at least 3 repeats to see {floor}"
        )
    text = f"{label}: this run could not tell a change under {result.detectable:.1%} from noise"
    text += f" (floor {floor})"
    if result.drift_limits and result.drift is not None:
        return (
            f"{text}: its median moves by {result.drift:.1%} (sigma) from run to run (the last "
            f"{result.drift_runs} good runs), which more repeats in one run cannot shrink"
        )
    if result.repeats_needed is None:
        return text
    text += f"; {result.repeats_needed} repeats per side would see {floor}"
    if result.repeats_needed > MAX_REPEATS:
        text += ", more than a spec allows: reduce the noise"
    return text


def _median(samples: list[float]) -> float | None:
    return round(statistics.median(samples), 4) if samples else None
