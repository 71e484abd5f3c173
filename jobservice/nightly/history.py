"""A case's history of nights, read from the results of its spec's earlier runs: the reference runs,
the longer window the drift is read from, and the episode tonight continues.

Pure functions over ``EarlierRun`` values (``finalize.earlier_runs`` reads them, newest first), so
the selection rules are tested without a database:

- a run counts for a metric when its case did the same work (same digest) and measured the same
  kind of figures; it is **eligible** unless its case regressed or failed, the metric itself
  regressed, or it was a night of an episode that ended in a regression. Inconclusive runs count.
- **a pin restarts the history**: the pinned run (always eligible: "accept as the new normal") is
  the oldest run read.
- the **reference** is the newest ``REFERENCE_RUNS`` eligible runs, the **drift window** the newest
  ``DRIFT_WINDOW`` (their medians' variance is the drift once there are more than 20).
- an **open episode** is continued when the newest run of the case left one open (and it began
  after the pin); its nights are then kept out of the reference, which is what came before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobservice.nightly.figures import METRICS, Metric, metric_figures
from jobservice.nightly.stats import RunStats, run_stats, variances_agree
from jobservice.nightly.verdicts import (
    ADAPTIVE_DRIFT_DF,
    DRIFT_WINDOW,
    MIN_REFERENCE,
    REFERENCE_RUNS,
    Drift,
    drift_of,
)

NOT_REFERENCE = ("regressed", "failed")  # case verdicts that keep a run out of the reference


@dataclass(frozen=True)
class EarlierRun:
    """One earlier finished run of the spec: what the history needs of its row."""

    id: str
    created_at: datetime
    pinned: bool
    results: dict[str, Any]
    environment: dict[str, Any] = field(default_factory=dict)


@dataclass
class MetricHistory:
    """One metric of one case: its reference runs and drift window (newest first), the open
    episode tonight continues (None: tonight is judged alone), and the drift it is judged with."""

    reference: list[RunStats] = field(default_factory=list)
    window: list[RunStats] = field(default_factory=list)
    episode: dict[str, Any] | None = None
    drift: Drift | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: kept with the night's results, so its comparison can be read again later."""
        return {
            "reference": [r.as_dict() for r in self.reference],
            "window_runs": len(self.window),
            "episode": self.episode,
            "drift": self.drift.as_dict() if self.drift else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetricHistory:
        """The inverse of ``as_dict`` (the window's runs themselves are not kept)."""
        drift = data.get("drift")
        return cls(
            reference=[RunStats.from_dict(r) for r in data.get("reference") or []],
            episode=data.get("episode"),
            drift=Drift.from_dict(drift) if drift else None,
        )


def _judged(results: dict[str, Any], name: str) -> dict[str, Any]:
    comparison = results.get("comparison") or {}
    return next((c for c in comparison.get("cases") or [] if c.get("case") == name), {})


def _metric_entry(judged: dict[str, Any], metric: str) -> dict[str, Any]:
    return next((m for m in judged.get("metrics") or [] if m.get("metric") == metric), {})


def _night_ids(episode: dict[str, Any] | None) -> set[str]:
    return {str(n.get("run")) for n in (episode or {}).get("nights") or []}


def metric_history(
    case: dict[str, Any], metric: Metric, earlier: Sequence[EarlierRun], *, continue_episode: bool = True
) -> MetricHistory:
    """The history of ``metric`` for ``case`` (tonight's results of the case) in ``earlier``."""
    found = MetricHistory()
    kind = metric_figures(metric, case)
    newest = True
    regressed_nights: set[str] = set()  # nights of episodes that ended in a regression
    seen: set[str] = set()
    pinned_at: str | None = None
    for run in earlier:
        old = next((c for c in run.results.get("cases") or [] if c.get("name") == case["name"]), None)
        usable = (
            old is not None
            and old.get("digest") == case.get("digest")
            and metric_figures(metric, old) == kind
        )
        if old is not None and usable:
            entry = _metric_entry(_judged(run.results, case["name"]), metric.name)
            episode = entry.get("episode") or None
            if newest and continue_episode and episode and episode.get("state") == "open":
                found.episode = episode
            newest = False
            if episode and episode.get("state") == "closed" and episode.get("outcome") == "regression":
                regressed_nights |= _night_ids(episode)
            seen.add(run.id)
            skip = run.id in _night_ids(found.episode) or run.id in regressed_nights
            if not skip and (run.pinned or _eligible(old, run.results, entry)):
                stats = run_stats((old.get("samples") or {}).get(metric.name) or [], run=run.id)
                if stats is not None:
                    found.window.append(stats)
        if run.pinned:
            pinned_at = run.id
            break
        if len(found.window) >= DRIFT_WINDOW:
            break
    if found.episode is not None and pinned_at is not None:
        nights = _night_ids(found.episode)
        if pinned_at in nights or not nights <= seen:
            # It began at or before the pin: accepting the state ends it, and its nights count again.
            return metric_history(case, metric, earlier, continue_episode=False)
    found.reference = found.window[:REFERENCE_RUNS]
    if len(found.reference) < MIN_REFERENCE:
        if found.episode is not None:  # episodes are for a case with a history, not the cold start
            return metric_history(case, metric, earlier, continue_episode=False)
        return found
    source = "history" if len(found.window) > REFERENCE_RUNS else "reference"
    found.drift = drift_of(found.window, source=source)
    return found


def _eligible(old: dict[str, Any], results: dict[str, Any], entry: dict[str, Any]) -> bool:
    """Whether a run of a case may be in the reference of ``entry``'s metric."""
    if old.get("status") == "failed":
        return False
    if _judged(results, old["name"]).get("verdict") in NOT_REFERENCE:
        return False
    return entry.get("verdict") != "regression"


def pool_drifts(histories: dict[str, MetricHistory]) -> None:
    """Judge every case of a metric with the drift pooled over the batch's cases (``histories``: by
    case) when each case's own has fewer than ``ADAPTIVE_DRIFT_DF`` degrees of freedom, their
    variances agree (Bartlett's test at 1 %), and together they reach that many."""
    own = {name: h.drift for name, h in histories.items() if h.drift is not None}
    short = {name: d for name, d in own.items() if d.df < ADAPTIVE_DRIFT_DF}
    if len(own) < 2 or not short:
        return
    estimates = [(d.omega2, d.df) for d in own.values()]
    total = sum(df for _, df in estimates)
    if total < ADAPTIVE_DRIFT_DF or not variances_agree(estimates):
        return
    pooled = Drift(
        omega2=sum(v * df for v, df in estimates) / total,
        df=total,
        source="pooled",
        runs=sum(d.runs for d in own.values()),
    )
    for name in short:
        histories[name].drift = pooled


def case_histories(
    cases: Sequence[dict[str, Any]], metrics: Sequence[str], earlier: Sequence[EarlierRun]
) -> dict[str, dict[str, MetricHistory]]:
    """Every case's history of every tracked metric (by case, then metric), drifts pooled per metric
    over the cases where that is allowed (``pool_drifts``)."""
    found: dict[str, dict[str, MetricHistory]] = {c["name"]: {} for c in cases}
    for name in metrics:
        metric = METRICS[name]
        per_case = {c["name"]: metric_history(c, metric, earlier) for c in cases}
        pool_drifts(per_case)
        for case_name, history in per_case.items():
            found[case_name][name] = history
    return found
