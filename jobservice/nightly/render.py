"""A finished batch's report as JSON, CSV (one row per case, like the seed benchmark tables) and
Markdown. Regressions and failures come first everywhere: they are what a reader looks for.

Every seed-table column is filled for every case: a figure, or "n/a (why)" when the back end cannot
produce it (a FlashHead run streams no frames, so it has no time to first frame) or the runs gave
none; the ``figures`` column says whether a case's run figures are warm or cold (see metrics.py).
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from jobservice.db.tables import Batch
from jobservice.nightly.compare import CASE_ORDER, disturbed_note, tracked_metrics
from jobservice.nightly.figures import METRICS

# The seed tables' columns, in their order; a spec's other tracked metrics follow.
TABLE_METRICS = (
    "cold_start_ms",
    "ttff_ms",
    "generate_ms",
    "steady_chunk_core_ms",
    "steady_fps",
    "render_fps",
    "rtf",
    "denoise_loop_ms",
    "export_ms",
    "peak_mb",
)
# The cases a report lists above its table, and under which heading.
SECTIONS = (
    ("Needs attention", ("regressed", "failed", "changed", "missing")),
    ("Could not tell", ("inconclusive",)),
)
FIGURES = {"warm": "warm", "cold": "cold (loads the model every run)", "mixed": "mixed warm and cold"}


def hardware(case: dict[str, Any], environment: dict[str, Any]) -> str:
    """Where a case ran: the worker's cards if it has any, else its device (e.g. ``cpu``)."""
    info = case.get("info") or {}
    node = str(info.get("worker_id") or "").split("#", 1)[0]
    worker = ((environment.get("runs") or {}).get("workers") or {}).get(node) or {}
    cards = worker.get("cards") or []
    device = info.get("device") or info.get("backend") or "?"
    return f"{device} ({', '.join(cards)})" if cards and device != "cpu" else str(device)


def _case_metrics(case: dict[str, Any], verdict_of: dict[str, Any], tracked: list[str]) -> dict[str, Any]:
    """One case's figure per shown metric (tracked ones, then the seed-table columns), with its
    comparison against the baseline when there was one."""
    metrics = {}
    for name in dict.fromkeys([*tracked, *TABLE_METRICS]):
        summary = (case.get("summary") or {}).get(name) or {}
        versus: dict[str, Any] = next((m for m in verdict_of.get("metrics") or [] if m["metric"] == name), {})
        metrics[name] = {
            "median": summary.get("median"),
            "sigma": summary.get("sigma"),
            "n": summary.get("n", 0),
            "why": (case.get("unavailable") or {}).get(name) or "no value recorded",
            "baseline": versus.get("baseline"),
            "change": versus.get("change"),
            "threshold": versus.get("threshold"),
            "detectable": versus.get("detectable"),
            "repeats_needed": versus.get("repeats_needed"),
            "drift": versus.get("drift") if versus.get("drift_limits") else None,
            "verdict": versus.get("verdict", "n/a"),
            "note": versus.get("note") or ("no baseline" if not verdict_of else "not tracked by the spec"),
        }
    return metrics


def _case_row(
    case: dict[str, Any], *, verdict_of: dict[str, Any], tracked: list[str], environment: dict[str, Any]
) -> dict[str, Any]:
    """One case of a report: its verdict and reasons, where and how it ran, and its metrics.

    ``verdict_of`` is the case's comparison against the baseline, empty when there was none.
    """
    runs = case.get("runs") or []
    info = case.get("info") or {}
    if verdict_of:
        verdict = verdict_of["verdict"]
    else:
        verdict = "failed" if case.get("status") == "failed" else "no_baseline"
    failed_checks = [e["message"] for e in case.get("expectations") or [] if not e["passed"]]
    return {
        "case": case["name"],
        "model": case.get("model"),
        "verdict": verdict,
        "reasons": verdict_of.get("reasons") or failed_checks,
        "hardware": hardware(case, environment),
        "resolution": f"{info.get('width')}x{info.get('height')}" if info.get("width") else None,
        "fps": info.get("fps"),
        "frames": info.get("frames"),
        "repeats": len(runs),
        "passed": sum(1 for r in runs if r.get("status") == "succeeded"),
        "figures": case.get("figures") or ("warm" if case.get("samples") else None),
        "metrics": _case_metrics(case, verdict_of, tracked),
        "frames_check": verdict_of.get("frames") or {"verdict": "n/a"},
        "disturbed": disturbed_note(verdict_of.get("disturbed") or {}),
        "frames_digest": (case.get("frames") or {}).get("digest"),
        "expectations": case.get("expectations") or [],
        "jobs": [r["job_id"] for r in runs],
    }


def _batch_header(batch: Batch) -> dict[str, Any]:
    """The batch's own fields a report shows above its cases."""
    return {
        "id": str(batch.id),
        "name": batch.name,
        "status": batch.status,
        "verdict": batch.verdict,
        "source": batch.source,
        "origin": batch.origin,
        "spec_digest": batch.spec_digest,
        "pinned": batch.pinned,
        "baseline_id": str(batch.baseline_id) if batch.baseline_id else None,
        "created_at": batch.created_at.isoformat() if batch.created_at else None,
        "finished_at": batch.finished_at.isoformat() if batch.finished_at else None,
        "error": batch.error,
    }


def report_data(batch: Batch) -> dict[str, Any]:
    """Everything a report shows, as one JSON-ready dict, cases worst first."""
    results = batch.results or {}
    comparison = results.get("comparison") or {}
    compared = {c["case"]: c for c in comparison.get("cases") or []}
    tracked = tracked_metrics(batch.spec or {})
    cases = [
        _case_row(
            case,
            verdict_of=compared.get(case["name"]) or {},
            tracked=tracked,
            environment=batch.environment or {},
        )
        for case in results.get("cases") or []
    ]
    order = [*CASE_ORDER, "no_baseline"]
    cases.sort(key=lambda c: order.index(c["verdict"]) if c["verdict"] in order else len(order))
    return {
        "object": "batch_report",
        "batch": _batch_header(batch),
        "tracked_metrics": tracked,
        "counts": comparison.get("counts") or {},
        "cases": cases,
        "environment": batch.environment or {},
    }


def render_json(batch: Batch) -> str:
    """The report as indented JSON."""
    return json.dumps(report_data(batch), indent=2, default=str)


def fmt(value: Any, unit: str = "") -> str:
    """A number for people: thousands separators for ms and MB, 3 significant places otherwise."""
    if value is None:
        return "-"
    if not isinstance(value, int | float):
        return str(value)
    if abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}" if unit else text


def na(why: str) -> str:
    """A figure that is not there, and why."""
    return f"n/a ({why})"


def median_cell(m: dict[str, Any]) -> Any:
    """A case's median of a metric, or n/a and why."""
    return m["median"] if m.get("median") is not None else na(m.get("why") or "no value recorded")


def fmt_change(change: float | None) -> str:
    """A relative change as a signed percentage."""
    return "" if change is None else f"{change:+.1%}"


def metric_heading(name: str) -> str:
    """A metric's column heading: its label, with the unit unless the label already says it."""
    metric = METRICS[name]
    return (
        metric.label if not metric.unit or metric.unit in metric.label else f"{metric.label} ({metric.unit})"
    )


def shown_metrics(data: dict[str, Any]) -> list[str]:
    """The seed tables' metrics and the tracked ones, leaving out those no case has a value for."""
    names = list(dict.fromkeys([*TABLE_METRICS, *data["tracked_metrics"]]))
    return [
        n for n in names if any((c["metrics"].get(n) or {}).get("median") is not None for c in data["cases"])
    ]


def render_csv(batch: Batch) -> str:
    """One row per case: the seed tables' columns, then each tracked metric and its change."""
    data = report_data(batch)
    names = list(dict.fromkeys([*TABLE_METRICS, *data["tracked_metrics"]]))
    header = ["case", "model", "verdict", "hardware", "resolution", "fps", "frames", "repeats", "passed"]
    header += ["figures"]
    header += [f"{n}{suffix}" for n in names for suffix in ("", "_baseline", "_change", "_verdict")]
    header += ["frames_check", "reasons"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for case in data["cases"]:
        row = [case[k] for k in ("case", "model", "verdict", "hardware", "resolution", "fps", "frames")]
        row += [case["repeats"], case["passed"], case["figures"] or na("no run succeeded")]
        for name in names:
            m = case["metrics"].get(name) or {}
            why = m.get("note") or "not compared"
            row += [median_cell(m), m.get("baseline") if m.get("baseline") is not None else na(why)]
            row += [m["change"] if m.get("change") is not None else na(why), m.get("verdict") or "n/a"]
        row += [case["frames_check"].get("verdict"), "; ".join(case["reasons"])]
        writer.writerow(["" if v is None else v for v in row])
    return out.getvalue()


def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(batch: Batch) -> str:
    """A page people read at a glance: verdict, what regressed and why, the table, the environment."""
    data = report_data(batch)
    info = data["batch"]
    verdict = (info["verdict"] or info["status"]).upper()
    lines = [f"# Batch {info['name']}: {verdict}", ""]
    lines.append(f"- batch `{info['id']}` ({info['source']})")
    lines.append(f"- created {info['created_at']}, finished {info['finished_at']}")
    baseline = f"`{info['baseline_id']}`" if info["baseline_id"] else "none (nothing to compare with yet)"
    lines.append(f"- baseline: {baseline}{' · this run is pinned as the baseline' if info['pinned'] else ''}")
    lines.append(f"- spec: {info['origin'] or '-'} (digest `{info['spec_digest'][:12]}`)")
    if info["error"]:
        lines.append(f"- error: {info['error']}")
    lines.append("")
    for title, verdicts in SECTIONS:
        flagged = [c for c in data["cases"] if c["verdict"] in verdicts]
        if not flagged:
            continue
        lines += [f"## {title}", ""]
        for case in flagged:
            lines.append(
                f"- **{case['case']}** ({case['model']}): {case['verdict']}: {'; '.join(case['reasons'])}"
            )
            if case["disturbed"]:
                lines.append(f"  - {case['disturbed']}")
        lines.append("")
    names = shown_metrics(data)
    lines += ["## Results (medians; change vs baseline)", ""]
    lines.append(
        "A case's figures are warm (a resident back end: its cold run is the cold start) or cold "
        "(the back end loads the model in every run, like the seed tables' FlashHead runs). "
        "⚠: regressed; ?: the run's noise hid changes above the floor (inconclusive)."
    )
    lines.append("")
    head = ["case", "verdict", "model", "hardware", "resolution", "fps", "runs ok", "figures"]
    head += [metric_heading(n) for n in names]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for case in data["cases"]:
        cells = [case["case"], case["verdict"], case["model"], case["hardware"], case["resolution"] or "-"]
        cells += [fmt(case["fps"]), f"{case['passed']}/{case['repeats']}"]
        cells.append(FIGURES.get(case["figures"] or "", "-"))
        for name in names:
            m = case["metrics"].get(name) or {}
            text = fmt(median_cell(m))
            if m.get("change") is not None:
                mark = {"regression": " ⚠", "inconclusive": " ?"}.get(m.get("verdict") or "", "")
                text += f" ({fmt_change(m['change'])}{mark})"
            cells.append(text)
        lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
    lines.append("")
    lines += _not_shown_lines(data, names)
    lines += _environment_lines(data["environment"])
    return "\n".join(lines) + "\n"


def _not_shown_lines(data: dict[str, Any], shown: list[str]) -> list[str]:
    """The seed-table columns no case has a figure for, each with why (the first case's reason)."""
    lines = []
    for name in dict.fromkeys([*TABLE_METRICS, *data["tracked_metrics"]]):
        if name in shown or not data["cases"]:
            continue
        reasons = dict.fromkeys(str((c["metrics"].get(name) or {}).get("why")) for c in data["cases"])
        lines.append(f"- {metric_heading(name)}: n/a ({'; '.join(reasons)})")
    return ["Not measured in any case:", "", *lines, ""] if lines else []


def _environment_lines(env: dict[str, Any]) -> list[str]:
    lines = ["## Environment", ""]
    created = env.get("created_by") or {}
    if created:
        lines.append(
            f"- created on {created.get('host')} by {created.get('user') or '?'}: jobservice "
            f"{created.get('jobservice')}, commit {created.get('commit') or 'unknown'}"
        )
    runs = env.get("runs") or {}
    for node, worker in (runs.get("workers") or {}).items():
        cards = ", ".join(worker.get("cards") or []) or "no cards"
        where = f"{worker.get('device')} on {worker.get('hostname') or '?'} ({cards})"
        lines.append(f"- worker {node}: {where}, {worker.get('runs')} runs")
    versions = runs.get("versions") or {}
    if versions:
        lines.append("- versions: " + ", ".join(f"{k} {'/'.join(v)}" for k, v in versions.items()))
    for change in env.get("changes") or []:
        lines.append(f"- changed since the baseline: {change}")
    return [*lines, ""]


def _limit_text(m: dict[str, Any]) -> str:
    """What a metric's change had to exceed; for an inconclusive one, what the run could have seen."""
    if m.get("verdict") == "inconclusive":
        if m.get("detectable") is None:
            return f"noise unknown (one run per side), floor {m.get('floor') or 0:.1%}"
        needed = f", {m['repeats_needed']} repeats would see it" if m.get("repeats_needed") else ""
        if m.get("drift_limits") and m.get("drift") is not None:
            needed = f", its median drifts {m['drift']:.1%} from run to run"
        return f"sees only >{m['detectable']:.1%}, floor {m.get('floor') or 0:.1%}{needed}"
    if m.get("threshold") is not None:
        return f"threshold {m['threshold']:.1%}"
    return str(m.get("note", ""))


def render_comparison_text(comparison: dict[str, Any], *, verbose: bool = False) -> str:
    """A terminal table of case verdicts, worst first; ``verbose`` adds every metric's figures."""
    cases = comparison.get("cases") or []
    width = max([len(c["case"]) for c in cases] + [4])
    verdict_width = max([len(c["verdict"]) for c in cases] + [len("VERDICT")])
    lines = [f"{'VERDICT':<{verdict_width}} {'CASE':<{width}}  WHY"]
    for case in cases:
        why = "; ".join(case.get("reasons") or []) or "-"
        lines.append(f"{case['verdict'].upper():<{verdict_width}} {case['case']:<{width}}  {why}")
        disturbed = disturbed_note(case.get("disturbed") or {})
        if disturbed:
            lines.append(f"{' ' * (verdict_width + width + 3)}{disturbed}")
        if not verbose:
            continue
        for m in case.get("metrics") or []:
            figures = f"{fmt(m['baseline'], m['unit'])} -> {fmt(m['candidate'], m['unit'])}"
            limit = _limit_text(m)
            change = fmt_change(m.get("change")) or "n/a"
            pad = " " * (verdict_width + width + 5)
            kind = m.get("figures")
            label = f"{m['label']} ({kind})" if kind and kind not in m["label"] else m["label"]
            lines.append(f"{pad}{label:<28} {figures:<28} {change:>7}  {limit}  {m['verdict']}")
        frames = case.get("frames") or {}
        if frames.get("verdict") not in (None, "n/a"):
            lines.append(f"{' ' * (width + 15)}{'frames':<28} {frames['verdict']}")
    counts = {k: v for k, v in (comparison.get("counts") or {}).items() if v}
    lines.append("")
    lines.append(
        f"verdict: {comparison.get('verdict', '?')}  ({', '.join(f'{v} {k}' for k, v in counts.items())})"
    )
    return "\n".join(lines)
