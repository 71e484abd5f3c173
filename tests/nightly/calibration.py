"""Synthetic nights through the production verdict (``jobservice.nightly.verdicts.judge_metric``):
the error rates of the decided procedure on a host of given noise, with fixed seeds.

A host is its within-run noise σ and its drift τ between nights (log scale, so relative). A night
of a case shifted by ``shift`` has the drift d ~ N(0, τ²) and samples exp(shift + d + e), e ~ N(0, σ²).
Each draw makes a fresh history of unchanged nights (``window`` of them; the newest 20 are the
reference), then judges night 1 alone; when that opens an episode, the next nights (same shift,
fresh drifts) are judged pooled with it, up to 4, exactly as ``compare.compare_metric`` does.
With ``window`` > 20 the drift is read from the longer window (df = window - 1 >= 30), and the
night adapts its repeats 3 -> 6 -> 12 at α/3 per look (``verdicts.next_look``).

With ``cases`` > 1 the history has that many cases on the same host, sharing each night's drift
(the worst case for pooling: their drifts are one drift), their drifts pooled as finalization pools
them (``history.pool_drifts``: they agree and together reach 30 df), and the first case is judged.

Used by tests/nightly/test_calibration.py (the goals) and ``scripts/bench_nightly.py --calibrate``
(the table in docs/benchmarks.md).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from statistics import NormalDist

from jobservice.nightly.history import MetricHistory, pool_drifts
from jobservice.nightly.looks import looks_for
from jobservice.nightly.stats import RunStats, run_stats
from jobservice.nightly.verdicts import (
    EPISODE_NIGHTS,
    REFERENCE_RUNS,
    Drift,
    VerdictLimits,
    drift_of,
    judge_metric,
    next_look,
)


@dataclass(frozen=True)
class Host:
    """Within-run noise and drift between nights (relative sigmas)."""

    name: str
    sigma: float
    tau: float


TWO_CORE = Host("2-core", sigma=0.025, tau=0.02)  # measured by scripts/bench_nightly.py (issue 36)
QUIET_CARD = Host("quiet card", sigma=0.01, tau=0.005)  # assumed until the real-card check measures it
SHIFTS = {"unchanged": 0.0, "5% slower": math.log(1.05), "15% slower": math.log(1.15)}


@dataclass(frozen=True)
class Rate:
    """A share of draws with its 95 % Wilson interval."""

    hits: int
    draws: int

    @property
    def value(self) -> float:
        """The share."""
        return self.hits / self.draws if self.draws else 0.0

    def interval(self, confidence: float = 0.95) -> tuple[float, float]:
        """Wilson's score interval."""
        if not self.draws:
            return 0.0, 1.0
        z = NormalDist().inv_cdf(0.5 + confidence / 2)
        n, p = self.draws, self.value
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return max(0.0, centre - half), min(1.0, centre + half)

    def text(self) -> str:
        """The share and its interval in percent."""
        low, high = self.interval()
        return f"{self.value:.3%} [{low:.3%}, {high:.3%}] ({self.hits}/{self.draws})"


@dataclass
class Tally:
    """What the draws of one host and shift came to."""

    host: Host
    shift: str
    draws: int = 0
    night1: dict[str, int] = field(default_factory=dict)  # the verdict of night 1 (judged alone)
    nights: dict[str, int] = field(default_factory=dict)  # every judged night, pooled ones included
    regressed_by_night2: int = 0  # draws whose night 1 or 2 read regression
    repeats: int = 0  # samples taken, over every judged night
    judged_nights: int = 0

    def first(self, verdict: str) -> Rate:
        """Night 1's share of ``verdict``."""
        return Rate(self.night1.get(verdict, 0), self.draws)

    def per_night(self, verdict: str) -> Rate:
        """The share of all judged nights (episodes' pooled nights included) with ``verdict``."""
        return Rate(self.nights.get(verdict, 0), self.judged_nights)

    def by_night2(self) -> Rate:
        """The share of draws that read regression on night 1 or, pooled, on night 2."""
        return Rate(self.regressed_by_night2, self.draws)

    @property
    def mean_repeats(self) -> float:
        """Samples per judged night."""
        return self.repeats / self.judged_nights if self.judged_nights else 0.0


def _samples(rng: random.Random, host: Host, shift: float, drift: float, n: int) -> list[float]:
    return [math.exp(shift + drift + rng.gauss(0.0, host.sigma)) for _ in range(n)]


def _history(
    rng: random.Random, host: Host, *, window: int, repeat: int, cases: int
) -> tuple[list[RunStats], Drift | None]:
    """One case's reference runs and the drift it is judged with (pooled over ``cases`` cases that
    share each night's drift, when there are several)."""
    drifts = [rng.gauss(0.0, host.tau) for _ in range(window)]
    windows = [[run_stats(_samples(rng, host, 0.0, d, repeat)) for d in drifts] for _ in range(cases)]
    histories = {
        str(i): MetricHistory(reference=[r for r in w if r is not None][-REFERENCE_RUNS:])
        for i, w in enumerate(windows)
    }
    for i, w in enumerate(windows):
        runs = [r for r in w if r is not None]
        histories[str(i)].drift = drift_of(runs, source="history" if window > REFERENCE_RUNS else "reference")
    pool_drifts(histories)
    return histories["0"].reference, histories["0"].drift


def calibrate(
    host: Host,
    shift: str,
    *,
    draws: int,
    seed: int,
    window: int = REFERENCE_RUNS,
    repeat: int = 3,
    cases: int = 1,
) -> Tally:
    """``draws`` histories of ``window`` unchanged nights, each followed by the nights of one case
    shifted by ``SHIFTS[shift]`` (night 1, and the episode it opens)."""
    rng = random.Random(seed)
    tally = Tally(host, shift)
    change = SHIFTS[shift]
    for _ in range(draws):
        reference, drift = _history(rng, host, window=window, repeat=repeat, cases=cases)
        limits = VerdictLimits(looks=looks_for(drift))
        earlier: list[RunStats] = []
        tally.draws += 1
        for night in range(EPISODE_NIGHTS):
            level, nightly_drift = repeat, rng.gauss(0.0, host.tau)
            samples = _samples(rng, host, change, nightly_drift, level)
            while True:  # the looks of one night: more repeats of the same night (same drift)
                tonight = run_stats(samples)
                assert tonight is not None
                result = judge_metric(
                    [*earlier, tonight], reference, better="lower", limits=limits, drift=drift
                )
                more = next_look(result, repeat=repeat, level=level)
                if more is None:
                    break
                samples += _samples(rng, host, change, nightly_drift, more - level)
                level = more
            tally.judged_nights += 1
            tally.repeats += level
            tally.nights[result.verdict] = tally.nights.get(result.verdict, 0) + 1
            if night == 0:
                tally.night1[result.verdict] = tally.night1.get(result.verdict, 0) + 1
            if night <= 1 and result.verdict == "regression":
                tally.regressed_by_night2 += 1
            if not result.episode_open:
                break
            earlier.append(tonight)
    return tally
