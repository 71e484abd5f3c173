"""More runs for a case before its night is judged: disturbed repeats run again, and repeats that
adapt (3 -> 6 -> 12) when a night cannot tell.

When every job of a batch has ended, finalization judges it; before recording the verdict it asks
``more_runs`` whether some case should run more, and if so queues those jobs instead (the batch
stays running and is judged again when they end). The decision is a pure function of the jobs and
the judgement, so the beat's tick, an API request and a waiting CLI that all get here decide alike
(the jobs' idempotency keys make a second submission a no-op).

- **Disturbed repeats**: a run whose RunReport's ``host`` says something ran beside it is run again,
  at most ``DISTURBED_RERUNS`` (2) extra runs per case; the judged samples are the undisturbed runs
  first, disturbed ones only to make up the count.
- **Adaptive repeats**: only for a case whose drift between nights is known with at least
  ``ADAPTIVE_DRIFT_DF`` (30) degrees of freedom (pooled over the batch's cases or read from 60
  runs; with one case's 20 runs it did worse than a fixed 3): every look of the night is then
  judged at α/3 (Bonferroni over the looks 3, 6, 12), and an inconclusive primary metric takes the
  next look unless no number of repeats up to the last look could decide it (futility) or the
  spec's ``time_budget_s`` would be spent.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from jobservice.nightly.figures import RunFacts
from jobservice.nightly.verdicts import ADAPTIVE_DRIFT_DF, DISTURBED_RERUNS, LOOK_LEVELS, Drift, next_look


@dataclass(frozen=True)
class CasePlan:
    """How many runs a case makes tonight: ``level`` judged samples (the look's repeats), plus
    ``reruns`` extra runs replacing disturbed ones; ``looks``: the looks its night may take."""

    level: int
    reruns: int = 0
    looks: int = 1

    @property
    def runs(self) -> int:
        """Jobs the case has tonight."""
        return self.level + self.reruns

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (kept in the batch's results under ``plan``)."""
        return asdict(self)


def case_plan(plan: dict[str, Any], case: dict[str, Any]) -> CasePlan:
    """A case's plan so far (the spec's repeats when nothing was added)."""
    found = plan.get(case["name"]) or {}
    return CasePlan(
        level=int(found.get("level") or case["repeat"]),
        reruns=int(found.get("reruns") or 0),
        looks=int(found.get("looks") or 1),
    )


def looks_for(drift: Drift | None) -> int:
    """The looks a night may take: 3 when the drift is known well enough to adapt, else 1."""
    return len(LOOK_LEVELS) if drift is not None and drift.df >= ADAPTIVE_DRIFT_DF else 1


def is_disturbed(run: RunFacts) -> bool:
    """Whether the run's report says something ran beside it on the host."""
    return bool((run.host or {}).get("disturbed"))


def measured(runs: list[RunFacts]) -> list[RunFacts]:
    """The succeeded runs whose own figures count (all but the cold run of a resident back end, which
    is measured as the cold start), in repeat order."""
    return sorted(
        (r for r in runs if r.status == "succeeded" and (r.per_run or not r.cold)), key=lambda r: r.repeat
    )


def used_runs(runs: list[RunFacts], level: int) -> list[RunFacts]:
    """The succeeded runs whose figures are judged: ``level`` runs, undisturbed ones first and
    disturbed ones only to make up the count (each in repeat order), and any cold run of a resident
    back end (its cold start)."""
    cold = [r for r in runs if r.status == "succeeded" and r.cold and not r.per_run]
    good = measured(runs)
    clean = [r for r in good if not is_disturbed(r)]
    if len(clean) >= level:
        return cold + clean
    return cold + clean + [r for r in good if is_disturbed(r)][: level - len(clean)]


def more_runs(
    cases: list[dict[str, Any]],
    runs_by_case: dict[str, list[RunFacts]],
    plan: dict[str, Any],
    *,
    judged: dict[str, dict[str, Any]],
    durations: dict[str, list[float]],
    elapsed_s: float,
    budget_s: float | None,
) -> dict[str, CasePlan]:
    """The cases that should run more before the night is judged, with their new plans (empty:
    judge now). ``cases``: the resolved spec's; ``judged``: each case's comparison (with its
    ``looks`` and primary metric); ``durations``: seconds its jobs took; ``elapsed_s``: since the
    batch started, up to its last job's end."""
    more: dict[str, CasePlan] = {}
    spent = elapsed_s
    for case in cases:
        name = case["name"]
        current = case_plan(plan, case)
        good = measured(runs_by_case.get(name) or [])
        clean = sum(1 for r in good if not is_disturbed(r))
        disturbed_used = min(sum(1 for r in good if is_disturbed(r)), max(0, current.level - clean))
        per_run = statistics.median(durations[name]) if durations.get(name) else 0.0
        rerun = min(DISTURBED_RERUNS - current.reruns, disturbed_used)
        if rerun > 0 and _affordable(spent, rerun * per_run, budget_s):
            more[name] = CasePlan(current.level, current.reruns + rerun, current.looks)
            spent += rerun * per_run
            continue
        nxt = _next_level(case, current, judged.get(name) or {})
        if nxt is not None and _affordable(spent, (nxt - current.level) * per_run, budget_s):
            more[name] = CasePlan(nxt, current.reruns, current.looks)
            spent += (nxt - current.level) * per_run
    return more


def _affordable(spent: float, cost: float, budget: float | None) -> bool:
    return budget is None or spent + cost <= budget


def _next_level(case: dict[str, Any], current: CasePlan, judged: dict[str, Any]) -> int | None:
    """The next look's repeats when the primary metric is inconclusive and more could decide it."""
    primary: dict[str, Any] = next((m for m in judged.get("metrics") or [] if m.get("primary")), {})
    return next_look({**primary, "looks": current.looks}, repeat=int(case["repeat"]), level=current.level)


def job_seconds(started: datetime | None, finished: datetime | None) -> float | None:
    """How long a job ran, when both ends are known."""
    if started is None or finished is None:
        return None
    return max(0.0, (finished - started).total_seconds())
