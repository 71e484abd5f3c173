"""A night's cases judged: per metric against the case's history of nights (``verdicts.py``), the
case's verdict from its primary metric, the output gate and the frames against the baseline run.

Pure functions over the ``results`` batches stored when they finished. Each case of a night keeps
its history (``reference``: per metric the reference runs' medians, the drift and the episode it
continued; ``history.py`` chose them), so a night's comparison can be computed again at any time.
A case is compared only when its digest (model, resolved parameters, input contents) is the same
on both sides; otherwise it is ``changed``.

**A case's verdict is its primary metric's** (``generate_ms``, or the spec's ``primary:``), so a
batch of 10 cases is not 80 chances of a false alarm: the other metrics are compared and reported
with their own verdicts but do not fail the batch. Beside it, a case regresses when fewer of its
runs passed the output gate than the baseline's, or when a deterministic case's frames changed,
and fails when an expectation failed.

A run figure (generate time, fps, RTF, first frame, chunks) is compared only when both sides'
figures are of the same kind (warm runs of a resident back end, or every run of one that loads
the model per run; see figures.py); otherwise it is ``n/a`` and says why.

``compare_results(..., use_history=False)`` judges a candidate against one baseline run alone (the
cold start's rule: an assumed drift between the two runs): what ``batch compare A B`` shows.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from jobservice.nightly.figures import METRICS, Metric, metric_figures
from jobservice.nightly.history import MetricHistory
from jobservice.nightly.stats import RunStats, run_stats, summarize
from jobservice.nightly.verdicts import (
    EPISODE_NIGHTS,
    MIN_REFERENCE,
    Judgement,
    VerdictLimits,
    assumed_drift_for,
    explain,
    judge_metric,
    not_compared,
    zero_baseline,
)

log = logging.getLogger(__name__)

# Worst first: the order cases are listed in every report.
CASE_ORDER = ("regressed", "failed", "changed", "missing", "inconclusive", "new", "improved", "ok")
# Exit codes of the gates (``jobservice batch compare``, ``batch run --wait``, ``batch status``).
EXIT_PASSED, EXIT_REGRESSED, EXIT_INCONCLUSIVE = 0, 1, 3
PRIMARY = "generate_ms"


def thresholds_for(spec: dict[str, Any], metric: str, *, device: str | None = None) -> VerdictLimits:
    """What ``metric`` is held to under ``spec`` (a metric's own floor applies when it is larger)."""
    base = dict(spec.get("thresholds") or {})
    relative = float(base.get("relative", 0.03))
    own = METRICS[metric].floor
    if own is not None:
        relative = max(relative, own)
    choice: dict[str, Any] = next((m for m in spec.get("metrics") or [] if m.get("name") == metric), {})
    if choice.get("relative") is not None:
        relative = float(choice["relative"])
    drift = spec.get("assumed_drift")
    return VerdictLimits(
        alpha=float(base.get("alpha", 0.001)),
        alpha_ok=float(base.get("alpha_ok", 0.01)),
        floor=relative,
        ok_within=float(choice.get("ok_within") or base.get("ok_within", 0.04)),
        assumed_drift=float(drift) if drift is not None else assumed_drift_for(device),
        few_samples_floor=float(base.get("few_samples_relative", 0.10)),
    )


def tracked_metrics(spec: dict[str, Any]) -> list[str]:
    """The metric names a spec tracks, in its order."""
    return [m["name"] for m in spec.get("metrics") or [] if m.get("name") in METRICS]


def primary_metric(spec: dict[str, Any]) -> str:
    """The metric a case's verdict is (a spec stored before ``primary`` existed: generate time)."""
    return str(spec.get("primary") or PRIMARY)


def _pass_rate(case: dict[str, Any]) -> float | None:
    runs = case.get("runs") or []
    return sum(1 for r in runs if r.get("status") == "succeeded") / len(runs) if runs else None


def _frames(baseline: dict[str, Any] | None, candidate: dict[str, Any]) -> dict[str, Any]:
    if not candidate.get("deterministic"):
        return {"verdict": "n/a", "note": "not a deterministic case"}
    if baseline is None:
        return {"verdict": "n/a", "note": "no baseline run to compare the frames with"}
    old, new = baseline.get("frames") or {}, candidate.get("frames") or {}
    if not old.get("digest") or not new.get("digest"):
        if old.get("file_digest") and new.get("file_digest"):  # no per-frame hashes: the MP4 files
            same = old["file_digest"] == new["file_digest"]
            return {
                "verdict": "unchanged" if same else "changed",
                "changed_frames": "?",
                "frames": "?",
                "note": "compared the output files (the model wrote its own video)",
            }
        return {"verdict": "n/a", "note": "no frame digest on one side"}
    if old["digest"] == new["digest"]:
        return {"verdict": "unchanged", "frames": len(new.get("hashes") or [])}
    a, b = old.get("hashes") or [], new.get("hashes") or []
    changed = sum(1 for x, y in zip(a, b, strict=False) if x != y) + abs(len(a) - len(b))
    return {"verdict": "changed", "changed_frames": changed, "frames": max(len(a), len(b))}


def regression_reason(metric: Metric, result: Judgement) -> str:
    """Why a metric counts as regressed: its change and what a regression needed.

    A zero reference median has no relative change (``change`` is None): the reason then gives
    both medians, e.g. "peak device memory rose from 0 to 5 MB".
    """
    if result.change is None:
        old, new = result.baseline or 0.0, result.candidate or 0.0
        direction = "rose" if new > old else "fell"
        unit = f" {metric.unit}" if metric.unit else ""
        return f"{metric.label} {direction} from {_amount(old)} to {_amount(new)}{unit}"
    return explain(metric.label, result)


def _amount(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


@dataclass(frozen=True)
class Night:
    """What a metric's comparison knows beyond the two cases: tonight's run id, the looks its case
    may take, and whether the environment changed (which opens an episode on an unsure night)."""

    run_id: str | None = None
    use_history: bool = True
    environment_changed: bool = False


def _history(candidate: dict[str, Any], metric: str, night: Night) -> MetricHistory | None:
    stored = (candidate.get("reference") or {}).get(metric)
    if not night.use_history or not isinstance(stored, dict):
        return None  # a comparison of two runs alone, or results stored before histories were kept
    history = MetricHistory.from_dict(stored)
    return history if len(history.reference) >= MIN_REFERENCE else None


def compare_metric(
    metric: Metric,
    baseline: dict[str, Any] | None,
    candidate: dict[str, Any],
    *,
    spec: dict[str, Any],
    night: Night | None = None,
) -> tuple[Judgement, dict[str, Any] | None]:
    """One metric of one case: the judgement, and the episode it opens, continues or closes (None
    when the night is judged alone and opens none). ``n/a`` (and why) when it cannot be judged."""
    night = night or Night()
    new = (candidate.get("samples") or {}).get(metric.name) or []
    if not new:
        side = candidate
        if baseline is not None and not (baseline.get("samples") or {}).get(metric.name):
            side = baseline  # neither side has it: say why the baseline has none, as a reader expects
        why = (side.get("unavailable") or {}).get(metric.name)
        name = "baseline" if side is baseline else "candidate"
        return not_compared(f"no {name} samples" + (f": {why}" if why else "")), None
    info = candidate.get("info") or {}
    limits = thresholds_for(spec, metric.name, device=info.get("device"))
    looks = int((candidate.get("looks") or {}).get("looks") or 1)
    limits = VerdictLimits(**{**limits.__dict__, "looks": looks})
    history = _history(candidate, metric.name, night)
    tonight = run_stats(new, run=night.run_id)
    if history is not None and tonight is not None:
        earlier = [RunStats.from_dict(n) for n in (history.episode or {}).get("nights") or []]
        result = judge_metric(
            [*earlier, tonight],
            history.reference,
            better=metric.better,
            limits=limits,
            drift=history.drift,
            environment_changed=night.environment_changed,
        )
        return result, _episode(history.episode, tonight, result)
    return _against_baseline(metric, baseline, candidate, new, limits), None


def _against_baseline(
    metric: Metric,
    baseline: dict[str, Any] | None,
    candidate: dict[str, Any],
    new: list[float],
    limits: VerdictLimits,
) -> Judgement:
    """The cold start: tonight against the baseline run, with the assumed drift between them."""
    if baseline is None:
        return not_compared("no baseline run and fewer than 5 reference runs")
    old = (baseline.get("samples") or {}).get(metric.name) or []
    a, b = summarize(old), summarize(new)
    if not old:
        why = (baseline.get("unavailable") or {}).get(metric.name)
        note = "no baseline samples" + (f": {why}" if why else "")
        return not_compared(note, candidate=b.median, nc=b.n)
    old_kind, new_kind = metric_figures(metric, baseline), metric_figures(metric, candidate)
    if old_kind != new_kind or new_kind == "mixed":
        note = f"baseline figures are {old_kind}, these are {new_kind}: not compared"
        return not_compared(note, baseline=a.median, candidate=b.median, nb=a.n, nc=b.n)
    reference, tonight = run_stats(old), run_stats(new)
    if reference is None or tonight is None:  # a zero (or negative) figure has no logarithm
        return zero_baseline(old, new, better=metric.better)
    return judge_metric([tonight], [reference], better=metric.better, limits=limits)


def _episode(episode: dict[str, Any] | None, tonight: RunStats, result: Judgement) -> dict[str, Any] | None:
    """The episode record kept with tonight's metric: opened, continued, or closed with its outcome."""
    if episode is None and not result.episode_open:
        return None
    nights = [*((episode or {}).get("nights") or []), tonight.as_dict()]
    record = {
        "first": nights[0]["run"],
        "night": len(nights),
        "of": EPISODE_NIGHTS,
        "nights": nights,
        "change": result.change,
        "upper": result.upper,
    }
    if result.episode_open:
        return {**record, "state": "open", "outcome": None}
    return {**record, "state": "closed", "outcome": result.verdict}


@dataclass
class _Judged:
    """Every tracked metric of one case compared, and what the primary one says about the case."""

    metrics: list[dict[str, Any]] = field(default_factory=list)
    primary: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None  # the primary metric's sentence
    others: list[str] = field(default_factory=list)  # other metrics' regressions, reported only
    episodes: list[dict[str, Any]] = field(default_factory=list)


def _compare_metrics(
    baseline: dict[str, Any] | None, candidate: dict[str, Any], *, spec: dict[str, Any], night: Night
) -> _Judged:
    """Every tracked metric of one case compared. A metric that cannot be read is ``n/a`` with why,
    not an error."""
    judged = _Judged()
    primary = primary_metric(spec)
    for name in tracked_metrics(spec):
        metric = METRICS[name]
        entry = {
            "metric": name,
            "label": metric.label,
            "unit": metric.unit,
            "better": metric.better,
            "figures": metric_figures(metric, candidate),
            "primary": name == primary,
        }
        try:
            result, episode = compare_metric(metric, baseline, candidate, spec=spec, night=night)
            sentence = regression_reason(metric, result)
        except Exception as exc:  # noqa: BLE001 - one unreadable metric must not stop the comparison
            log.exception("case %s: metric %s could not be compared", candidate["name"], name)
            note = f"not compared: {type(exc).__name__}: {exc}"
            judged.metrics.append({**entry, "verdict": "n/a", "note": note})
            if name == primary:
                judged.primary = judged.metrics[-1]
            continue
        row = {**entry, **result.as_dict(), "episode": episode, "reason": sentence}
        judged.metrics.append(row)
        if episode is not None:
            judged.episodes.append({"metric": name, "label": metric.label, **_without_nights(episode)})
        if name == primary:
            judged.primary, judged.reason = row, sentence
        elif result.verdict == "regression":
            judged.others.append(f"{sentence} (not the primary metric: reported, not failing the case)")
    return judged


def _without_nights(episode: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in episode.items() if k != "nights"}


def _compare_validation(
    baseline: dict[str, Any] | None, candidate: dict[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """The share of runs passing the output gate on both sides, and the reason if it fell."""
    old_rate, new_rate = (_pass_rate(baseline) if baseline else None), _pass_rate(candidate)
    validation = {"baseline_pass_rate": old_rate, "candidate_pass_rate": new_rate, "verdict": "ok"}
    if old_rate is not None and new_rate is not None and new_rate < old_rate:
        validation["verdict"] = "regression"
        return validation, f"runs passing the gate fell from {old_rate:.0%} to {new_rate:.0%}"
    return validation, None


def _frames_reason(frames: dict[str, Any]) -> str | None:
    """Why the output frames count as a regression, or None when they did not change."""
    if frames["verdict"] != "changed":
        return None
    if "note" in frames:
        return "the output video changed (its file differs)"
    return f"output frames changed ({frames['changed_frames']} of {frames['frames']})"


CASE_VERDICTS = {
    "regression": "regressed",
    "improvement": "improved",
    "ok": "ok",
    "inconclusive": "inconclusive",
}


def compare_case(
    baseline: dict[str, Any] | None,
    candidate: dict[str, Any],
    *,
    spec: dict[str, Any],
    night: Night | None = None,
) -> dict[str, Any]:
    """The verdict on one case, with the reasons and every metric's comparison."""
    night = night or Night()
    out: dict[str, Any] = {"case": candidate["name"], "model": candidate.get("model"), "reasons": []}
    if baseline is not None and baseline.get("digest") != candidate.get("digest"):
        reason = "its model, parameters or inputs differ from the baseline's; not compared"
        return {**out, "verdict": "changed", "reasons": [reason], "metrics": []}
    has_history = any(_history(candidate, name, night) is not None for name in tracked_metrics(spec))
    if baseline is None and not has_history:
        return {**out, "verdict": "new", "reasons": ["no baseline run and no history yet"], "metrics": []}
    judged = _compare_metrics(baseline, candidate, spec=spec, night=night)
    validation, fell = _compare_validation(baseline, candidate)
    frames = _frames(baseline, candidate)
    primary = judged.primary.get("verdict", "n/a")
    reasons = [why for why in (fell, _frames_reason(frames)) if why is not None]
    if primary == "regression" and judged.reason:
        reasons.insert(0, judged.reason)
    if candidate.get("status") == "failed":
        verdict = "failed"
        reasons = [e["message"] for e in candidate.get("expectations") or [] if not e["passed"]] + reasons
    elif reasons:
        verdict = "regressed"
    elif primary in CASE_VERDICTS:
        verdict = CASE_VERDICTS[primary]
        reasons = [judged.reason] if judged.reason else []
    else:
        verdict = "inconclusive"
        label = METRICS[primary_metric(spec)].label
        reasons = [
            f"{label}, the primary metric, was not compared: {judged.primary.get('note') or 'no figures'}"
        ]
    return {
        **out,
        "verdict": verdict,
        "reasons": reasons,
        "primary": primary_metric(spec),
        "others": judged.others,
        "metrics": judged.metrics,
        "episodes": judged.episodes,
        "validation": validation,
        "frames": frames,
        "disturbed": disturbed_runs(baseline or {}, candidate),
    }


def disturbed_runs(baseline: dict[str, Any], candidate: dict[str, Any]) -> dict[str, Any]:
    """How many runs on each side had other work beside them on the host (the RunReport's ``host``),
    so that a noisy sample can be recognised; runs from before the field existed count as unknown."""

    def side(case: dict[str, Any]) -> dict[str, Any]:
        runs = [r for r in case.get("runs") or [] if r.get("status") == "succeeded"]
        hosts = [r["host"] for r in runs if r.get("host")]
        return {
            "runs": len(runs),
            "measured": len(hosts),
            "disturbed": sum(1 for h in hosts if h.get("disturbed")),
            "used": sum(1 for r in runs if r.get("used", True) and (r.get("host") or {}).get("disturbed")),
            "other_cores_max": max((h.get("other_cores") or 0.0 for h in hosts), default=None),
        }

    return {"baseline": side(baseline), "candidate": side(candidate)}


def disturbed_note(disturbed: dict[str, Any]) -> str | None:
    """A sentence when some compared runs ran beside other work on their host, else None."""
    parts = []
    for name in ("baseline", "candidate"):
        found = disturbed.get(name) or {}
        if found.get("disturbed"):
            parts.append(f"{found['disturbed']} of {found['runs']} {name} runs")
    if not parts:
        return None
    text = f"{' and '.join(parts)} ran beside other work on the host (see each run's report: host)"
    candidate = disturbed.get("candidate") or {}
    if candidate.get("disturbed") and candidate.get("used", candidate["disturbed"]) < candidate["disturbed"]:
        text += f"; {candidate['disturbed'] - candidate['used']} of them were run again and left out"
    return text


def false_alarm_rate(alpha: float, cases: int) -> float:
    """The share of unchanged nights on which at least one of ``cases`` cases, each judged on its
    primary metric at ``alpha``, reads regressed: 1 - (1 - alpha) ** cases."""
    return 1.0 - (1.0 - alpha) ** cases


def compare_results(
    baseline: dict[str, Any] | None,
    candidate: dict[str, Any],
    *,
    spec: dict[str, Any],
    night: Night | None = None,
) -> dict[str, Any]:
    """Every case of ``candidate`` judged (against its history, or ``baseline``'s results), worst
    first, with the verdict counts, the open episodes and the batch-level false-alarm rate."""
    night = night or Night()
    old = {c["name"]: c for c in (baseline or {}).get("cases") or []}
    cases = [
        compare_case(old.get(c["name"]), c, spec=spec, night=night) for c in candidate.get("cases") or []
    ]
    seen = {c["name"] for c in candidate.get("cases") or []}
    for name, case in old.items():
        if name not in seen:
            cases.append(
                {
                    "case": name,
                    "model": case.get("model"),
                    "verdict": "missing",
                    "metrics": [],
                    "reasons": ["in the baseline, not in this run"],
                }
            )
    cases.sort(key=lambda c: CASE_ORDER.index(c["verdict"]))
    counts = {v: sum(1 for c in cases if c["verdict"] == v) for v in CASE_ORDER}
    worst = next((v for v in ("regressed", "failed", "inconclusive") if counts[v]), "passed")
    alpha = float((spec.get("thresholds") or {}).get("alpha", 0.001))
    judged = sum(1 for c in cases if (c.get("metrics") or []) and c["verdict"] not in ("changed", "missing"))
    episodes = [{"case": c["case"], **e} for c in cases for e in c.get("episodes") or []]
    return {
        "verdict": worst,
        "counts": counts,
        "cases": cases,
        "primary": primary_metric(spec),
        "alpha": alpha,
        "false_alarm_rate": round(false_alarm_rate(alpha, judged), 6),
        "judged_cases": judged,
        "episodes": episodes,
        "history": night.use_history,
    }


def false_alarm_sentence(comparison: dict[str, Any]) -> str | None:
    """What the batch's verdict risks: how often an unchanged batch would read regressed."""
    cases, alpha = comparison.get("judged_cases"), comparison.get("alpha")
    if not cases or alpha is None:
        return None
    rate = comparison.get("false_alarm_rate") or false_alarm_rate(alpha, cases)
    label = METRICS.get(str(comparison.get("primary") or PRIMARY))
    what = label.label if label else "the primary metric"
    return (
        f"{cases} case{'s' if cases != 1 else ''} judged on {what} at α = {alpha * 100:g} % each: "
        f"an unchanged batch reads regressed on at most {rate * 100:.2g} % of nights "
        "(other metrics are reported, not judged)"
    )


def has_regression(comparison: dict[str, Any]) -> bool:
    """Whether a gate should fail: a case regressed or failed its expectations."""
    counts = comparison.get("counts") or {}
    return bool(counts.get("regressed") or counts.get("failed"))


def gate_exit_code(comparison: dict[str, Any]) -> int:
    """1 when a case regressed or failed, else 3 when one could not tell, else 0."""
    if has_regression(comparison):
        return EXIT_REGRESSED
    return EXIT_INCONCLUSIVE if (comparison.get("counts") or {}).get("inconclusive") else EXIT_PASSED


def upper_bound_of(case: dict[str, Any]) -> float | None:
    """The primary metric's change not ruled out (relative), for lists and webhooks."""
    primary = next((m for m in case.get("metrics") or [] if m.get("primary")), None)
    value = (primary or {}).get("upper")
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value
