"""A candidate batch's cases against a baseline's: per metric, the validation verdict and the frames.

Pure functions over the ``results`` both batches stored when they finished, so any two finished
batches can be compared at any time (``jobservice batch compare A B``). A case is compared only
when its digest (model, resolved parameters, input contents) is the same on both sides; otherwise
it is reported as ``changed`` rather than judged on numbers that measure different work.

A run figure (generate time, fps, RTF, first frame, chunks) is compared only when both sides'
figures are of the same kind (``figures``: warm runs of a resident back end, or the cold runs of
one that loads the model every run; see metrics.py); otherwise it is ``n/a`` and says why.

A case is ``inconclusive`` when nothing regressed but a tracked metric's run could not have seen a
change of the spec's floor (stats.py), and so is a batch with such a case and nothing worse: the
gate's exit code for it is 3 (``EXIT_INCONCLUSIVE``), apart from 1 for a regression or failure.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field
from typing import Any

from jobservice.nightly.figures import METRICS, Metric
from jobservice.nightly.stats import Comparison, compare_samples, inconclusive_reason, summarize

log = logging.getLogger(__name__)

# Worst first: the order cases are listed in every report.
CASE_ORDER = ("regressed", "failed", "changed", "missing", "inconclusive", "new", "improved", "ok")
# Exit codes of the gates (``jobservice batch compare``, ``batch run --wait``, ``batch status``).
EXIT_PASSED, EXIT_REGRESSED, EXIT_INCONCLUSIVE = 0, 1, 3


def thresholds_for(spec: dict[str, Any], metric: str) -> dict[str, float]:
    """The relative floor, k and few-samples floor that apply to ``metric`` under ``spec``."""
    base = dict(spec.get("thresholds") or {})
    relative = float(base.get("relative", 0.03))
    own = METRICS[metric].floor
    if own is not None:
        relative = max(relative, own)
    choice: dict[str, Any] = next((m for m in spec.get("metrics") or [] if m.get("name") == metric), {})
    if choice.get("relative") is not None:
        relative = float(choice["relative"])
    return {
        "relative": relative,
        "k": float(choice.get("k") or base.get("k", 3.0)),
        "few_samples_relative": float(base.get("few_samples_relative", 0.10)),
    }


def tracked_metrics(spec: dict[str, Any]) -> list[str]:
    """The metric names a spec tracks, in its order."""
    return [m["name"] for m in spec.get("metrics") or [] if m.get("name") in METRICS]


def _pass_rate(case: dict[str, Any]) -> float | None:
    runs = case.get("runs") or []
    return sum(1 for r in runs if r.get("status") == "succeeded") / len(runs) if runs else None


def _frames(baseline: dict[str, Any], candidate: dict[str, Any]) -> dict[str, Any]:
    old, new = baseline.get("frames") or {}, candidate.get("frames") or {}
    if not candidate.get("deterministic"):
        return {"verdict": "n/a", "note": "not a deterministic case"}
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


def regression_reason(metric: Metric, result: Comparison) -> str:
    """Why a metric counts as regressed: the relative change and its threshold.

    A zero baseline median has no relative change (``change`` is None): the reason then gives
    both medians, e.g. "peak device memory rose from 0 to 5 MB".
    """
    if result.change is None or result.threshold is None:
        old, new = result.baseline or 0.0, result.candidate or 0.0
        direction = "rose" if new > old else "fell"
        unit = f" {metric.unit}" if metric.unit else ""
        return f"{metric.label} {direction} from {_amount(old)} to {_amount(new)}{unit}"
    return f"{metric.label} {result.change:+.1%} (threshold {result.threshold:.1%})"


def _amount(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def case_figures(case: dict[str, Any]) -> str:
    """The kind of a case's run figures; results stored before kinds existed had warm ones only."""
    return str(case.get("figures") or "warm")


def metric_figures(metric: Metric, case: dict[str, Any]) -> str | None:
    """The kind of ``metric``'s samples in ``case``: its run figures' kind, cold, or None (any run)."""
    if metric.runs == "run":
        return case_figures(case)
    return "cold" if metric.runs == "cold" else None


def compare_metric(
    metric: Metric, baseline: dict[str, Any], candidate: dict[str, Any], *, spec: dict[str, Any]
) -> Comparison:
    """One metric of one case: n/a (and why) unless both sides have samples of the same kind."""
    old = (baseline.get("samples") or {}).get(metric.name) or []
    new = (candidate.get("samples") or {}).get(metric.name) or []
    old_kind, new_kind = metric_figures(metric, baseline), metric_figures(metric, candidate)
    if old and new and (old_kind != new_kind or new_kind == "mixed"):
        a, b = summarize(old), summarize(new)
        note = f"baseline figures are {old_kind}, these are {new_kind}: not compared"
        return Comparison(
            verdict="n/a",
            baseline=a.median,
            candidate=b.median,
            change=None,
            threshold=None,
            n_baseline=a.n,
            n_candidate=b.n,
            sigma=None,
            note=note,
        )
    history = (candidate.get("history") or {}).get(metric.name)
    limits = thresholds_for(spec, metric.name)
    result = compare_samples(old, new, better=metric.better, history=history, **limits)
    if result.verdict == "n/a":
        side = baseline if not old else candidate
        why = (side.get("unavailable") or {}).get(metric.name)
        if why:
            return Comparison(**{**result.as_dict(), "note": f"{result.note}: {why}"})
    return result


def history_medians(
    case: dict[str, Any], earlier: list[dict[str, Any]], *, spec: dict[str, Any]
) -> dict[str, list[float]]:
    """Per tracked metric, the medians of ``case`` in earlier runs' ``results`` (newest first) that
    did the same work (same digest) and measured the same kind of figures: what the comparison
    reads the drift from (stats.py)."""
    found: dict[str, list[float]] = {}
    for results in earlier:
        old = next((c for c in results.get("cases") or [] if c.get("name") == case["name"]), None)
        if old is None or old.get("digest") != case.get("digest"):
            continue
        for name in tracked_metrics(spec):
            metric = METRICS[name]
            samples = (old.get("samples") or {}).get(name) or []
            if samples and metric_figures(metric, old) == metric_figures(metric, case):
                found.setdefault(name, []).append(round(statistics.median(samples), 4))
    return found


@dataclass
class _Judged:
    """Every tracked metric of one case compared, and what that says about the case."""

    metrics: list[dict[str, Any]] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)  # why it regressed
    unsure: list[str] = field(default_factory=list)  # why it cannot tell (inconclusive metrics)
    improved: bool = False


def _compare_metrics(baseline: dict[str, Any], candidate: dict[str, Any], *, spec: dict[str, Any]) -> _Judged:
    """Every tracked metric of one case compared. A metric that cannot be read is ``n/a`` with why,
    not an error."""
    judged = _Judged()
    for name in tracked_metrics(spec):
        metric = METRICS[name]
        entry = {
            "metric": name,
            "label": metric.label,
            "unit": metric.unit,
            "better": metric.better,
            "figures": metric_figures(metric, candidate),
        }
        try:
            result = compare_metric(metric, baseline, candidate, spec=spec)
            why = regression_reason(metric, result) if result.verdict == "regression" else None
        except Exception as exc:  # noqa: BLE001 - one unreadable metric must not stop the comparison
            log.exception("case %s: metric %s could not be compared", candidate["name"], name)
            note = f"not compared: {type(exc).__name__}: {exc}"
            judged.metrics.append({**entry, "verdict": "n/a", "note": note})
            continue
        judged.metrics.append({**entry, **result.as_dict()})
        if why is not None:
            judged.regressions.append(why)
        elif result.verdict == "inconclusive":
            judged.unsure.append(inconclusive_reason(metric.label, result))
        elif result.verdict == "improvement":
            judged.improved = True
    return judged


def _compare_validation(
    baseline: dict[str, Any], candidate: dict[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """The share of runs passing the output gate on both sides, and the reason if it fell."""
    old_rate, new_rate = _pass_rate(baseline), _pass_rate(candidate)
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


def compare_case(
    baseline: dict[str, Any] | None, candidate: dict[str, Any], *, spec: dict[str, Any]
) -> dict[str, Any]:
    """The verdict on one case, with the reasons and every metric's comparison."""
    out: dict[str, Any] = {"case": candidate["name"], "model": candidate.get("model"), "reasons": []}
    if baseline is None:
        return {**out, "verdict": "new", "reasons": ["not in the baseline"], "metrics": []}
    if baseline.get("digest") != candidate.get("digest"):
        reason = "its model, parameters or inputs differ from the baseline's; not compared"
        return {**out, "verdict": "changed", "reasons": [reason], "metrics": []}
    judged = _compare_metrics(baseline, candidate, spec=spec)
    validation, fell = _compare_validation(baseline, candidate)
    frames = _frames(baseline, candidate)
    reasons = judged.regressions + [why for why in (fell, _frames_reason(frames)) if why is not None]
    if candidate.get("status") == "failed":
        verdict = "failed"
        reasons = [e["message"] for e in candidate.get("expectations") or [] if not e["passed"]] + reasons
    elif reasons:
        verdict = "regressed"
    elif judged.unsure:
        verdict, reasons = "inconclusive", judged.unsure
    else:
        verdict = "improved" if judged.improved else "ok"
    return {
        **out,
        "verdict": verdict,
        "reasons": reasons,
        "metrics": judged.metrics,
        "validation": validation,
        "frames": frames,
        "disturbed": disturbed_runs(baseline, candidate),
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
    return f"{' and '.join(parts)} ran beside other work on the host (see each run's report: host)"


def compare_results(
    baseline: dict[str, Any], candidate: dict[str, Any], *, spec: dict[str, Any]
) -> dict[str, Any]:
    """Every case of ``candidate`` against ``baseline`` (both batches' ``results``), worst first."""
    old = {c["name"]: c for c in baseline.get("cases") or []}
    cases = [compare_case(old.get(c["name"]), c, spec=spec) for c in candidate.get("cases") or []]
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
    return {"verdict": worst, "counts": counts, "cases": cases}


def has_regression(comparison: dict[str, Any]) -> bool:
    """Whether a gate should fail: a case regressed or failed its expectations."""
    counts = comparison.get("counts") or {}
    return bool(counts.get("regressed") or counts.get("failed"))


def gate_exit_code(comparison: dict[str, Any]) -> int:
    """1 when a case regressed or failed, else 3 when one could not tell, else 0."""
    if has_regression(comparison):
        return EXIT_REGRESSED
    return EXIT_INCONCLUSIVE if (comparison.get("counts") or {}).get("inconclusive") else EXIT_PASSED
