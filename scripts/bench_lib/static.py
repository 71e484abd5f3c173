"""The static baseline: the fleet before residency, which ``scripts/bench_fleet.py`` compares with.

Each free group serves only its pinned (``eligible``) models and takes their queues in turn (as
Celery's Redis transport does), the oldest job of the highest priority in a queue first, whoever
its tenant; what it loads it keeps. The service never runs this: it is the benchmark's yardstick,
and plugs into ``jobservice.fleet.simulate.Engine`` as its ``planner``.
"""

from __future__ import annotations

from jobservice.fleet.policy import Decision, FleetState


def plan_static(state: FleetState, turns: dict[str, int]) -> list[Decision]:
    """One job for every free group (see the module docstring); ``turns`` remembers whose turn it
    is, per group, and is updated."""
    left = {(w.model, w.priority, w.tenant): w.jobs for w in state.waiting if w.jobs > 0}
    oldest = {(w.model, w.priority, w.tenant): w.oldest for w in state.waiting}
    decisions: list[Decision] = []
    for group in sorted(state.groups, key=lambda g: g.id):
        if not group.free:
            continue
        queues = sorted(group.eligible)
        start = turns.get(group.id, 0)
        for step in range(len(queues)):
            model = queues[(start + step) % len(queues)]
            keys = [k for k, jobs in left.items() if k[0] == model and jobs > 0]
            if not keys or model not in state.models:
                continue
            turns[group.id] = (start + step + 1) % len(queues)
            key = min(keys, key=lambda k: (k[1], oldest[k], k[2]))
            left[key] -= 1
            cost = state.models[model]
            load = not cost.per_run and model not in group.resident
            decisions.append(
                Decision(
                    group=group.id, model=model, priority=key[1], tenant=key[2], load=load, reason="static"
                )
            )
            break
    return decisions


class StaticPlanner:
    """``plan_static`` with its turns kept: an ``Engine``'s ``planner`` for the static fleet."""

    def __init__(self) -> None:
        self.turns: dict[str, int] = {}

    def __call__(self, state: FleetState) -> list[Decision]:
        return plan_static(state, self.turns)
