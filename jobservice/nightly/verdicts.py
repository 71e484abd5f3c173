"""The verdict on one metric of one case: tonight against the history of nights, with stated error
rates (the procedure of issue 36; the arithmetic is in ``stats.py``).

Per case and metric, on the log scale (changes are relative; for a "higher is better" metric the
sign flips, so below a positive change is always the worse direction):

- **Reference**: the last ``REFERENCE_RUNS`` (20) runs of the same spec, tenant and case digest
  that did not regress or fail (``history.py`` finds them; a pin restarts them). Δ = tonight's
  median - the mean of the reference medians. With K reference runs, ω² the variance of their
  medians, s² the pooled within-run variance, f(n) / n the variance factor of a median of n:
  V = (1 + 1/K) ω² + (f(n)/n - f(n_h)/n_h) s², floored at ω²/K + f(n)/n s², degrees of freedom
  by Satterthwaite (K - 1 when tonight's n equals the history's).
- **Cold start** (fewer than ``MIN_REFERENCE`` reference runs): against the baseline run, with an
  assumed drift τ0 between runs (``assumed_drift``; 2 % on a CPU, 0.5 % on a card):
  V = 2 τ0² + (f(n)/n + f(n_b)/n_b) s², its degrees of freedom those of s².
- **Verdicts** (L: the looks a night may take, 3 with adaptive repeats, else 1):
  ``regression`` when Δ > t(1 - α/L, df) √V and Δ >= ln(1 + floor) (α = 0.1 %, floor 3 %);
  ``ok`` when Δ + t(1 - α_ok/L, df) √V < ln(1 + ok_within) (α_ok = 1 %, ok_within 4 %): a slowdown
  of ok_within or more is ruled out with 99 % confidence; ``improvement`` mirrors ``regression``;
  else ``inconclusive``, with the change not ruled out (``upper``), the change that would read
  ``regression`` (``detectable``) and what would decide it: ``repeats_needed`` when the noise
  within a run limits, ``nights_needed`` when the drift between nights does, else "reduce the noise".
- **Episodes**: an inconclusive night with Δ >= floor (or a changed environment) opens one; its
  next nights are judged pooled with it, against the reference from before it, at α/6 (and
  α_ok/6) each: with p nights V = (1/p + 1/K) ω² + (c_e - c_h)/p s². After ``EPISODE_NIGHTS`` (4)
  nights it closes inconclusive with its bound. Night 1 is always judged alone at α.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from jobservice.nightly.stats import (
    RunStats,
    mean_factor,
    median_variance_factor,
    pooled_variance,
    sample_variance,
    satterthwaite,
    t_quantile,
)

Verdict = Literal["regression", "improvement", "ok", "inconclusive", "n/a"]
Better = Literal["lower", "higher"]

ALPHA = 0.001  # false alarms per metric per night
ALPHA_OK = 0.01  # "ok" said of a change of ok_within or more
FLOOR = 0.03  # the smallest change worth a regression
OK_WITHIN = 0.04  # "ok" rules out a slowdown of this much
FEW_SAMPLES_FLOOR = 0.10  # one run a side, noise unknown: only a change this large counts
MIN_REFERENCE = 5  # reference runs before the history is used (else the cold start)
REFERENCE_RUNS = 20  # the reference: the last this many good runs
DRIFT_WINDOW = 60  # runs whose medians' variance is the drift once there are more than 20
ADAPTIVE_DRIFT_DF = 30  # degrees of freedom of the drift before repeats may adapt
LOOK_LEVELS = (1, 2, 4)  # repeats of a night's looks, times the spec's (3 -> 6 -> 12)
DISTURBED_RERUNS = 2  # extra runs per case replacing runs that had other work beside them
EPISODE_NIGHTS = 4  # nights an episode pools at most
EPISODE_SHARE = 1 / 6  # of α (and α_ok) for each pooled night: 0.1 % / 6 = 0.0167 %
MAX_REPEATS = 50  # what a spec allows per case (jobservice.nightly.spec)
ASSUMED_DRIFT = {"cpu": 0.02, "card": 0.005}  # τ0 of the cold start, by device kind


def assumed_drift_for(device: str | None) -> float:
    """The cold start's τ0 for a device (``cpu``, ``cuda:0``, ``npu:1``...): 2 % on the CPU (and
    when unknown), 0.5 % on a card."""
    if device and device != "cpu" and not device.startswith("cpu"):
        return ASSUMED_DRIFT["card"]
    return ASSUMED_DRIFT["cpu"]


@dataclass(frozen=True)
class VerdictLimits:
    """What a metric's verdict is held to (the spec's thresholds; ``looks`` from the adaptive plan)."""

    alpha: float = ALPHA
    alpha_ok: float = ALPHA_OK
    floor: float = FLOOR
    ok_within: float = OK_WITHIN
    looks: int = 1
    assumed_drift: float = ASSUMED_DRIFT["cpu"]
    few_samples_floor: float = FEW_SAMPLES_FLOOR


@dataclass(frozen=True)
class Drift:
    """The variance of a case's nightly medians (ω², log scale), its degrees of freedom, and where
    it came from: ``reference`` (the reference runs), ``history`` (a longer window of good runs)
    or ``pooled`` (over the batch's cases, whose drifts agree)."""

    omega2: float
    df: float
    source: str
    runs: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Drift:
        """The inverse of ``as_dict``."""
        return cls(float(data["omega2"]), float(data["df"]), str(data["source"]), int(data["runs"]))


def drift_of(runs: Sequence[RunStats], *, source: str = "reference") -> Drift | None:
    """The variance of ``runs``' medians; None below two runs."""
    if len(runs) < 2:
        return None
    return Drift(sample_variance([r.median for r in runs]), len(runs) - 1, source, len(runs))


@dataclass(frozen=True)
class Judgement:
    """The verdict on one metric of one case, with everything that says how sure it is.

    Relative figures: ``change`` (the medians, tonight or the episode's nights against the
    reference, + = larger), ``upper`` (the change, in the worse direction, that the night cannot
    rule out at 1 - α_ok), ``detectable`` (the smallest change that would read ``regression``),
    ``sigma`` (noise within a run), ``drift`` (between nights, beyond that noise).
    """

    verdict: Verdict
    baseline: float | None  # the reference's median (geometric mean of its runs' medians), raw units
    candidate: float | None  # tonight's median, raw units
    change: float | None
    threshold: float | None  # the change that had to be exceeded (= detectable)
    n_baseline: int  # samples in the reference
    n_candidate: int  # tonight's samples
    sigma: float | None
    note: str = ""
    detectable: float | None = None
    floor: float | None = None
    repeats_needed: int | None = None
    drift: float | None = None
    drift_runs: int | None = None
    drift_limits: bool = False
    upper: float | None = None
    df: float | None = None
    alpha: float | None = None
    alpha_ok: float | None = None
    ok_within: float | None = None
    nights_needed: int | None = None
    reference_runs: int = 0
    nights: int = 1
    mode: str = "history"  # history | cold_start | one_run | zero | n/a
    drift_source: str | None = None
    drift_df: float | None = None
    looks: int = 1
    tonight_change: float | None = None  # in an episode: tonight's own change
    episode_open: bool = False  # the night opens or continues an episode

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def not_compared(
    note: str, *, baseline: float | None = None, candidate: float | None = None, nb: int = 0, nc: int = 0
) -> Judgement:
    """A metric that could not be judged (no samples on a side, other kinds of figures...)."""
    return Judgement("n/a", baseline, candidate, None, None, nb, nc, None, note, mode="n/a")


@dataclass(frozen=True)
class _Noise:
    """What V is made of, so that it can be projected to more repeats or more nights."""

    cold: bool
    drift2: float  # ω² (history) or τ0² (cold start)
    drift_df: float  # its degrees of freedom (infinite for an assumed τ0)
    s2: float
    s_df: float
    k: int
    c_h: float  # mean f(n)/n of the reference
    earlier: tuple[float, ...]  # f(n)/n of the episode's earlier nights

    def variance(self, tonight: float, nights: int, *, extra_df: float = 0) -> tuple[float, float, float]:
        """(V, df, the drift's share of V) with tonight's f(n)/n = ``tonight`` and ``nights`` pooled
        (future nights like tonight); ``extra_df``: more degrees of freedom of the within-run noise."""
        s_df = self.s_df + extra_df
        factors = [*self.earlier, *([tonight] * (nights - len(self.earlier)))]
        c_e = sum(factors) / len(factors)
        a = 1 / nights + 1 / self.k
        if self.cold:
            drift_part = a * self.drift2
            within = (c_e / nights + self.c_h / self.k) * self.s2
            return (
                drift_part + within,
                satterthwaite([(drift_part, math.inf), (within, s_df)]),
                drift_part,
            )
        terms = [(a * self.drift2, self.drift_df), ((c_e - self.c_h) / nights * self.s2, s_df)]
        floor = [(self.drift2 / self.k, self.drift_df), (c_e / nights * self.s2, s_df)]
        total = sum(v for v, _ in terms)
        if total < sum(v for v, _ in floor):
            terms = floor
            total = sum(v for v, _ in floor)
        drift_part = a * max(0.0, self.drift2 - self.c_h * self.s2)
        return total, satterthwaite(terms), min(drift_part, total)


def judge_metric(
    nights: Sequence[RunStats],
    reference: Sequence[RunStats],
    *,
    better: Better,
    limits: VerdictLimits,
    drift: Drift | None = None,
    environment_changed: bool = False,
) -> Judgement:
    """The verdict of the last of ``nights`` (earlier ones: the open episode it continues, oldest
    first) against ``reference`` (the history's runs, or the baseline run for a cold start).

    This is the one comparison function: finalization, ``batch compare`` and the calibration test
    (tests/nightly/test_calibration.py) all call it.
    """
    tonight, p, k = nights[-1], len(nights), len(reference)
    sign = 1.0 if better == "lower" else -1.0
    delta = statistics.fmean(n.median for n in nights) - statistics.fmean(r.median for r in reference)
    worse = sign * delta
    s2, s_df = pooled_variance([*reference, *nights])
    base: dict[str, Any] = {
        "baseline": round(math.exp(statistics.fmean(r.median for r in reference)), 4),
        "candidate": round(math.exp(tonight.median), 4),
        "change": round(math.expm1(delta), 5),
        "n_baseline": sum(r.n for r in reference),
        "n_candidate": tonight.n,
        "sigma": None if s2 is None else round(math.sqrt(s2), 5),
        "floor": limits.floor,
        "ok_within": limits.ok_within,
        "reference_runs": k,
        "nights": p,
        "looks": limits.looks,
    }
    if p > 1:
        base["tonight_change"] = round(
            math.expm1(tonight.median - statistics.fmean(r.median for r in reference)), 5
        )
    history = k >= MIN_REFERENCE
    if history:
        drift = drift or drift_of(reference)
    if (not history and s2 is None) or (history and drift is None):
        return _few_samples(worse, base, limits)
    noise = _Noise(
        cold=not history,
        drift2=drift.omega2 if (history and drift is not None) else limits.assumed_drift**2,
        drift_df=drift.df if (history and drift is not None) else math.inf,
        s2=s2 or 0.0,
        s_df=s_df,
        k=k,
        c_h=mean_factor(reference),
        earlier=tuple(n.factor for n in nights[:-1]),
    )
    share = 1.0 if p == 1 else EPISODE_SHARE
    alpha = limits.alpha * share / limits.looks
    alpha_ok = limits.alpha_ok * share / limits.looks
    variance, df, drift_part = noise.variance(tonight.factor, p)
    sd = math.sqrt(variance)
    t_reg, t_ok = _t(1 - alpha, df), _t(1 - alpha_ok, df)
    floor_log, ok_log = math.log1p(limits.floor), math.log1p(limits.ok_within)
    if worse > t_reg * sd and worse >= floor_log:
        verdict: Verdict = "regression"
    elif -worse > t_reg * sd and -worse >= floor_log:
        verdict = "improvement"
    elif worse + t_ok * sd < ok_log:
        verdict = "ok"
    else:
        verdict = "inconclusive"
    upper_log = worse + t_ok * sd
    detectable = math.expm1(max(t_reg * sd, floor_log))
    opens = (  # episodes pool nights against a history; a cold start has none to pool against
        verdict == "inconclusive"
        and not noise.cold
        and p < EPISODE_NIGHTS
        and (p > 1 or worse >= floor_log or environment_changed)
    )
    repeats = nights_more = None
    if verdict == "inconclusive":
        repeats = _repeats_needed(noise, worse, tonight.n, p, limits)
        if repeats is None and opens:
            nights_more = _nights_needed(noise, worse, tonight, p, limits)
    drift_value = (
        limits.assumed_drift if noise.cold else math.sqrt(max(0.0, noise.drift2 - noise.c_h * noise.s2))
    )
    return Judgement(
        verdict=verdict,
        threshold=round(detectable, 5),
        note=_note(verdict, p, noise.cold),
        detectable=round(detectable, 5),
        repeats_needed=repeats,
        drift=round(drift_value, 5),
        drift_runs=None if noise.cold or drift is None else drift.runs,
        drift_limits=drift_part > variance - drift_part,
        upper=round(math.expm1(sign * upper_log), 5),
        df=round(df, 2) if math.isfinite(df) else None,
        alpha=alpha,
        alpha_ok=alpha_ok,
        nights_needed=nights_more,
        mode="cold_start" if noise.cold else "history",
        drift_source="assumed" if noise.cold else (drift.source if drift else None),
        drift_df=None if noise.cold or drift is None else drift.df,
        episode_open=opens,
        **base,
    )


def look_levels(repeat: int) -> list[int]:
    """The repeats of each look of a night for a case of ``repeat`` repeats (3 -> 6 -> 12), at most
    a spec's largest repeat count."""
    return sorted({min(MAX_REPEATS, repeat * factor) for factor in LOOK_LEVELS})


def next_look(result: Judgement | dict[str, Any], *, repeat: int, level: int) -> int | None:
    """The repeats of the night's next look, or None: stop (decided, not adaptive, the last look
    reached, or futile: no number of repeats up to the last look could decide it at the change
    seen). ``repeat``: the spec's repeats of the case; ``level``: this look's."""

    def field(name: str) -> Any:
        return result.get(name) if isinstance(result, dict) else getattr(result, name)

    if field("verdict") != "inconclusive" or field("mode") != "history" or int(field("looks") or 1) <= 1:
        return None
    steps = look_levels(repeat)
    later = [step for step in steps if step > level]
    needed = field("repeats_needed")
    if not later or needed is None or needed > steps[-1]:
        return None
    return later[0]


def _t(p: float, df: float) -> float:
    return t_quantile(p, df)


def _decides(
    worse: float, noise: _Noise, factor: float, nights: int, extra_df: float, limits: VerdictLimits
) -> bool:
    """Whether a night whose change is ``worse`` (taken as the true one) would be decided, ok or a
    regression, with tonight's f(n)/n = ``factor``, ``nights`` pooled and ``extra_df`` more degrees
    of freedom of the within-run noise (more repeats tonight)."""
    variance, df, _ = noise.variance(factor, nights, extra_df=extra_df)
    share = (1.0 if nights == 1 else EPISODE_SHARE) / limits.looks
    sd = math.sqrt(variance)
    floor_log, ok_log = math.log1p(limits.floor), math.log1p(limits.ok_within)
    if worse >= floor_log and worse > _t(1 - limits.alpha * share, df) * sd:
        return True
    return worse + _t(1 - limits.alpha_ok * share, df) * sd < ok_log


def _repeats_needed(noise: _Noise, worse: float, n: int, nights: int, limits: VerdictLimits) -> int | None:
    """Tonight's repeats that would decide the night at the change seen (None: no number up to the
    most a spec allows would, because the drift between nights or the reference is larger)."""

    def enough(repeats: int) -> bool:
        factor = median_variance_factor(repeats) / repeats
        return _decides(worse, noise, factor, nights, repeats - n, limits)

    if n >= MAX_REPEATS or not enough(MAX_REPEATS):
        return None
    low, high = n, MAX_REPEATS  # more repeats only help: the first that is enough, by bisection
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


def _nights_needed(
    noise: _Noise, worse: float, tonight: RunStats, nights: int, limits: VerdictLimits
) -> int | None:
    """More nights like tonight (same change, same repeats), pooled in the episode, that would
    decide it; None when even the episode's last night would not."""
    for total in range(nights + 1, EPISODE_NIGHTS + 1):
        if _decides(worse, noise, tonight.factor, total, (total - nights) * (tonight.n - 1), limits):
            return total - nights
    return None


def _note(verdict: Verdict, nights: int, cold: bool) -> str:
    parts = []
    if nights > 1:
        parts.append(f"{nights} nights pooled (an episode)")
    if cold:
        parts.append("cold start: the baseline run and an assumed drift")
    return "; ".join(parts)


def _few_samples(worse: float, base: dict[str, Any], limits: VerdictLimits) -> Judgement:
    """One run a side and no history: the noise is unknown, so no error rate can be stated; only a
    change beyond ``few_samples_floor`` counts (and nothing is called ok)."""
    floor = math.log1p(max(limits.floor, limits.few_samples_floor))
    verdict: Verdict = "inconclusive"
    if worse > floor:
        verdict = "regression"
    elif -worse > floor:
        verdict = "improvement"
    note = "one run per side: the noise is unknown, so only large changes count"
    return Judgement(
        verdict=verdict,
        threshold=round(math.expm1(floor), 5),
        note=note,
        mode="one_run",
        **base,
    )


def zero_baseline(baseline: Sequence[float], candidate: Sequence[float], *, better: Better) -> Judgement:
    """A metric whose reference median is 0 (no device memory on a CPU run): no relative change
    exists, so it is judged on the two medians."""
    mb, mc = statistics.median(baseline), statistics.median(candidate)
    verdict: Verdict = (
        "ok" if mc == 0 else ("regression" if (mc > 0) == (better == "lower") else "improvement")
    )
    return Judgement(
        verdict,
        mb,
        mc,
        None,
        None,
        len(baseline),
        len(candidate),
        None,
        "baseline median is zero",
        mode="zero",
    )


def explain(label: str, result: Judgement) -> str:
    """One sentence on a metric's verdict: what it rules out, or why it cannot tell and what would."""
    change = "" if result.change is None else f"{result.change:+.1%}"
    when = f" over {result.nights} nights" if result.nights > 1 else ""
    if result.verdict == "n/a":
        return f"{label}: not compared ({result.note})"
    if result.mode == "zero":
        return f"{label}: {result.verdict} (the reference's median is zero)"
    if result.mode == "one_run":
        floor = f"{result.threshold or 0:.0%}"
        if result.verdict in ("regression", "improvement"):
            return f"{label} {change} (beyond {floor} with one run a side; no error rate can be stated)"
        return (
            f"{label}: one run per side, so the noise is unknown and only a change over {floor} "
            f"would show; run at least 2 repeats to state error rates"
        )
    upper = f"{result.upper:+.1%}" if result.upper is not None else "?"
    bound = _percent(1 - (result.alpha_ok or 0))
    if result.verdict == "regression":
        needs = f"{result.detectable:+.1%} at α = {_percent(result.alpha)}"
        return f"{label} {change}{when} (a regression needs {needs})"
    if result.verdict == "improvement":
        return f"{label} {change}{when}: an improvement beyond the noise"
    if result.verdict == "ok":
        return (
            f"{label} {change}{when}: a worsening of {result.ok_within or 0:.0%} or more is ruled out "
            f"with {bound} confidence (up to {upper} not ruled out)"
        )
    text = f"{label} {change}{when}: up to {upper} not ruled out; a regression needs {result.detectable:+.1%}"
    return f"{text}; {decider(result)}"


def decider(result: Judgement | dict[str, Any]) -> str:
    """What would decide an inconclusive metric (a judgement, or its stored dict): more repeats,
    more nights, or less noise."""
    fields = result if isinstance(result, dict) else asdict(result)
    repeats, nights = fields.get("repeats_needed"), fields.get("nights_needed")
    drift = f"{fields['drift']:.1%}" if fields.get("drift") is not None else "?"
    if repeats is not None:
        return f"{repeats} repeats would decide it"
    if nights is not None:
        more = f"{nights} more night{'s' if nights > 1 else ''}"
        return f"the drift between nights ({drift}) limits: {more} pooled would decide it"
    if fields.get("drift_limits") and fields.get("episode_open"):
        return (
            f"the drift between nights ({drift}) limits: neither repeats nor the episode's "
            f"{EPISODE_NIGHTS} nights pooled would decide it at this change: reduce the noise"
        )
    if fields.get("drift_limits"):
        return (
            f"the drift between nights ({drift}) limits, and no number of repeats can decide it: "
            "reduce the noise"
        )
    return "no number of repeats a spec allows would decide it: reduce the noise"


def _percent(value: float | None) -> str:
    if value is None:
        return "?"
    text = f"{value * 100:.4g}"
    return f"{text} %"
