"""A finished batch's report as JSON, CSV (one row per case, like the seed benchmark tables) and
Markdown. Regressions and failures come first everywhere: they are what a reader looks for, then
the cases that could not tell (with the change they cannot rule out and what would decide them),
then the episodes (nights that add up), and what the batch's verdict risks.

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
from jobservice.nightly.compare import (
    CASE_ORDER,
    disturbed_note,
    false_alarm_sentence,
    primary_metric,
    tracked_metrics,
)
from jobservice.nightly.figures import METRICS
from jobservice.nightly.verdicts import decider

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
    judgement when there was one."""
    metrics = {}
    for name in dict.fromkeys([*tracked, *TABLE_METRICS]):
        summary = (case.get("summary") or {}).get(name) or {}
        versus: dict[str, Any] = next((m for m in verdict_of.get("metrics") or [] if m["metric"] == name), {})
        episode = versus.get("episode") or None
        metrics[name] = {
            "median": summary.get("median"),
            "sigma": summary.get("sigma"),
            "n": summary.get("n", 0),
            "why": (case.get("unavailable") or {}).get(name) or "no value recorded",
            "primary": bool(versus.get("primary")),
            "baseline": versus.get("baseline"),
            "change": versus.get("change"),
            "tonight_change": versus.get("tonight_change"),  # in an episode: tonight's own change
            "upper": versus.get("upper"),
            "threshold": versus.get("threshold"),
            "detectable": versus.get("detectable"),
            "df": versus.get("df"),
            "alpha": versus.get("alpha"),
            "repeats_needed": versus.get("repeats_needed"),
            "nights_needed": versus.get("nights_needed"),
            "episode_open": versus.get("episode_open"),
            "reference_runs": versus.get("reference_runs"),
            "nights": versus.get("nights"),
            "mode": versus.get("mode"),
            "drift": versus.get("drift") if versus.get("drift_limits") else None,
            "verdict": versus.get("verdict", "n/a"),
            "reason": versus.get("reason"),
            "episode": {k: v for k, v in episode.items() if k != "nights"} if episode else None,
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
    looks = case.get("looks") or {}
    return {
        "case": case["name"],
        "model": case.get("model"),
        "verdict": verdict,
        "reasons": verdict_of.get("reasons") or failed_checks,
        "others": verdict_of.get("others") or [],
        "episodes": verdict_of.get("episodes") or [],
        "runs_added": {
            "reruns": looks.get("reruns", 0),
            "level": looks.get("level"),
            "looks": looks.get("looks"),
        },
        "hardware": hardware(case, environment),
        "resolution": f"{info.get('width')}x{info.get('height')}" if info.get("width") else None,
        "fps": info.get("fps"),
        "frames": info.get("frames"),
        "repeats": len(runs),
        "passed": sum(1 for r in runs if r.get("status") == "succeeded"),
        "figures": case.get("figures") or ("warm" if case.get("samples") else None),
        "metrics": _case_metrics(case, verdict_of, tracked),
        # the judged samples of each tracked metric (raw figures, for those who recompute)
        "samples": {name: (case.get("samples") or {}).get(name) or [] for name in tracked},
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
        "primary": primary_metric(batch.spec or {}),
        "counts": comparison.get("counts") or {},
        "judged": {
            "history": bool(comparison.get("history", False)),
            "alpha": comparison.get("alpha"),
            "false_alarm_rate": comparison.get("false_alarm_rate"),
            "risk": false_alarm_sentence(comparison) if comparison else None,
        },
        "episodes": comparison.get("episodes") or [],
        "cases": cases,
        "environment": batch.environment or {},
        "accept": {
            "what": "accept this run as the new normal: the history of its cases restarts here",
            "command": f"jobservice batch pin {batch.id}",
            "api": f"POST /batches/{batch.id}/pin",
        },
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
    header += [f"{n}{suffix}" for n in names for suffix in ("", "_baseline", "_change", "_upper", "_verdict")]
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
            row += [m["change"] if m.get("change") is not None else na(why)]
            row += [m["upper"] if m.get("upper") is not None else na(why), m.get("verdict") or "n/a"]
        row += [case["frames_check"].get("verdict"), "; ".join(case["reasons"])]
        writer.writerow(["" if v is None else v for v in row])
    return out.getvalue()


def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def judged_against(data: dict[str, Any]) -> str:
    """What the cases were judged against, in words (the report's header)."""
    info = data["batch"]
    baseline = f"`{info['baseline_id']}`" if info["baseline_id"] else None
    if not data["judged"]["history"]:
        return f"the baseline run {baseline}" if baseline else "nothing yet (the first run of its spec)"
    text = "the history of nights: each case's last 20 runs that did not regress or fail"
    if baseline:
        text += f" (until a case has 5 of them, the baseline run {baseline} and an assumed drift)"
    return text


def episode_line(episode: dict[str, Any]) -> str:
    """One episode in words: which metric of which case, its night, and where it stands."""
    where = f"{episode.get('case')}: {episode.get('label') or episode.get('metric')}"
    night = f"night {episode.get('night')} of at most {episode.get('of')}"
    change = f"{episode['change']:+.1%} pooled" if episode.get("change") is not None else "?"
    upper = f"up to {episode['upper']:+.1%} not ruled out" if episode.get("upper") is not None else ""
    if episode.get("state") == "open":
        return f"{where}: open, {night}: {change}, {upper}; the next night pools with it"
    return f"{where}: closed {episode.get('outcome')} after {night.split(' of ')[0]}: {change}, {upper}"


def render_markdown(batch: Batch) -> str:
    """A page people read at a glance: verdict, what regressed and why, what could not tell and what
    would decide it, episodes, the table, the environment."""
    data = report_data(batch)
    info = data["batch"]
    verdict = (info["verdict"] or info["status"]).upper()
    lines = [f"# Batch {info['name']}: {verdict}", ""]
    lines.append(f"- batch `{info['id']}` ({info['source']})")
    lines.append(f"- created {info['created_at']}, finished {info['finished_at']}")
    pinned = (
        " · pinned: accepted as the new normal, its cases' history restarts here" if info["pinned"] else ""
    )
    lines.append(f"- judged against: {judged_against(data)}{pinned}")
    lines.append(f"- spec: {info['origin'] or '-'} (digest `{info['spec_digest'][:12]}`)")
    if data["judged"]["risk"]:
        lines.append(f"- what a verdict risks: {data['judged']['risk']}")
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
        if title == SECTIONS[0][0]:
            lines += ["", f"If this is the new normal, accept it: `{data['accept']['command']}`."]
        lines.append("")
    others = [(c["case"], why) for c in data["cases"] for why in c["others"]]
    if others:
        lines += ["## Other metrics", ""]
        lines += [f"- **{case}**: {why}" for case, why in others]
        lines.append("")
    if data["episodes"]:
        lines += ["## Episodes (nights that add up)", ""]
        lines += [f"- {episode_line(e)}" for e in data["episodes"]]
        lines.append("")
    names = shown_metrics(data)
    lines += ["## Results (medians; change against the reference)", ""]
    lines.append(
        "A case's figures are warm (a resident back end: its cold run is the cold start) or cold "
        "(the back end loads the model in every run, like the seed tables' FlashHead runs). "
        f"A case's verdict is its primary metric's ({metric_heading(data['primary'])}, marked *). "
        "⚠: regression; ?: inconclusive; ✓: ok (a slowdown of 4 % or more ruled out)."
    )
    lines.append("")
    head = ["case", "verdict", "model", "hardware", "resolution", "fps", "runs ok", "figures"]
    head += [metric_heading(n) + (" *" if n == data["primary"] else "") for n in names]
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
                mark = {"regression": " ⚠", "inconclusive": " ?", "ok": " ✓"}.get(m.get("verdict") or "", "")
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
    """What a metric's verdict rests on: the change not ruled out, what a regression needs, and for
    an inconclusive one what would decide it."""
    if m.get("mode") == "one_run":
        return f"noise unknown (one run per side), only a change over {m.get('threshold') or 0:.0%} counts"
    if m.get("upper") is None:
        return str(m.get("note", ""))
    text = f"up to {m['upper']:+.1%} not ruled out, regression needs {m.get('detectable') or 0:+.1%}"
    if m.get("nights", 1) > 1:
        text += f", {m['nights']} nights pooled"
    if m.get("verdict") == "inconclusive":
        text += f"; {decider(m)}"
    return text


def render_comparison_text(comparison: dict[str, Any], *, verbose: bool = False) -> str:
    """A terminal table of case verdicts, worst first; ``verbose`` adds every metric's figures."""
    cases = comparison.get("cases") or []
    width = max([len(c["case"]) for c in cases] + [4])
    verdict_width = max([len(c["verdict"]) for c in cases] + [len("VERDICT")])
    lines = [f"{'VERDICT':<{verdict_width}} {'CASE':<{width}}  WHY"]
    pad = " " * (verdict_width + width + 3)
    for case in cases:
        why = "; ".join(case.get("reasons") or []) or "-"
        lines.append(f"{case['verdict'].upper():<{verdict_width}} {case['case']:<{width}}  {why}")
        disturbed = disturbed_note(case.get("disturbed") or {})
        if disturbed:
            lines.append(f"{pad}{disturbed}")
        for other in case.get("others") or []:
            lines.append(f"{pad}also: {other}")
        for episode in case.get("episodes") or []:
            lines.append(f"{pad}episode: {episode_line({'case': case['case'], **episode})}")
        if not verbose:
            continue
        for m in case.get("metrics") or []:
            figures = f"{fmt(m.get('baseline'), m['unit'])} -> {fmt(m.get('candidate'), m['unit'])}"
            change = fmt_change(m.get("change")) or "n/a"
            kind = m.get("figures")
            label = f"{m['label']} ({kind})" if kind and kind not in m["label"] else m["label"]
            label += " *" if m.get("primary") else ""
            lines.append(f"{pad}  {label:<30} {figures:<28} {change:>7}  {m['verdict']:<12} {_limit_text(m)}")
        frames = case.get("frames") or {}
        if verbose and frames.get("verdict") not in (None, "n/a"):
            lines.append(f"{pad}  {'frames':<30} {frames['verdict']}")
    counts = {k: v for k, v in (comparison.get("counts") or {}).items() if v}
    lines.append("")
    lines.append(
        f"verdict: {comparison.get('verdict', '?')}  ({', '.join(f'{v} {k}' for k, v in counts.items())})"
    )
    risk = false_alarm_sentence(comparison)
    if risk:
        lines.append(risk)
    if verbose:
        lines.append("* the primary metric: a case's verdict is its verdict")
    return "\n".join(lines)
