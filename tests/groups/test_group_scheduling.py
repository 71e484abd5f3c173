"""What the fleet policy (``jobservice.fleet.policy``, played by the simulator in virtual time)
does with a job group's jobs: no second scheduler, only what residency already gives.

A group's jobs are ordinary batch-priority jobs of one tenant. Found:

- Jobs of one model run back to back whenever a card group holds that model warm ("warm next"),
  and the dispatcher takes them oldest first, which for a group is row order (their
  ``created_at`` follows the rows): one load per model and card group.
- With two card groups, a manifest of two models interleaved row by row ends with one group per
  model: two loads for twenty jobs, however the rows are ordered.
- With one card group that holds both models, it loads each once and then keeps both.
- With ONE card group that has room for only one model at a time, the policy's "unserved first"
  rule does not swap away from a model that still has queued work until the other model's oldest
  job has waited three swaps' time, so each model runs in a stint: two loads for twenty jobs,
  however the rows are ordered.
"""

from __future__ import annotations

import pytest

from jobservice.fleet.policy import CardGroupState, ModelCost
from jobservice.fleet.simulate import Engine, SimJob

BATCH = 6  # jobservice.settings: queue_batch_priority


def play(order: list[str], *, groups: int, memory_gb_per_card: float | None) -> tuple[int, dict[str, str]]:
    """A group's jobs, submitted at once in ``order`` of models: (loads, each card group's models in
    the order it ran them)."""
    models = {m: ModelCost(id=m, memory_gb=8, load_s=20, speed=1.0) for m in "ab"}
    fleet = [
        CardGroupState(id=f"g{i}", cards=1, eligible=frozenset("ab"), memory_gb_per_card=memory_gb_per_card)
        for i in range(groups)
    ]
    engine = Engine(groups=fleet, models=models)
    for row, model in enumerate(order, start=1):
        engine.submit(
            SimJob(id=f"row{row}", model=model, tenant="t", priority=BATCH, output_s=5.0, submitted=0.0)
        )
    engine.run_until_idle()
    ran: dict[str, str] = {}
    for job in sorted(engine.done, key=lambda j: (j.started or 0.0, j.id)):
        ran[str(job.group)] = ran.get(str(job.group), "") + job.model
    return len(engine.loads), ran


INTERLEAVED = ["a", "b"] * 10
BLOCKS = ["a"] * 10 + ["b"] * 10


def test_two_card_groups_each_keep_one_model_of_an_interleaved_manifest() -> None:
    loads, ran = play(INTERLEAVED, groups=2, memory_gb_per_card=10)
    assert loads == 2 and sorted(ran.values()) == ["a" * 10, "b" * 10]


def test_one_card_group_with_room_for_both_loads_each_once() -> None:
    loads, ran = play(INTERLEAVED, groups=1, memory_gb_per_card=20)
    assert loads == 2 and ran["g0"].endswith("a" * 9 + "b" * 9)


def test_a_model_held_warm_takes_its_jobs_back_to_back_in_row_order() -> None:
    models = {"a": ModelCost(id="a", memory_gb=8, load_s=20, speed=1.0)}
    engine = Engine(groups=[CardGroupState(id="g0", cards=1, eligible=frozenset("a"))], models=models)
    for row in range(1, 6):
        engine.submit(
            SimJob(id=f"row{row}", model="a", tenant="t", priority=BATCH, output_s=1.0, submitted=row * 1e-6)
        )
    engine.run_until_idle()
    assert [j.id for j in sorted(engine.done, key=lambda j: j.started or 0.0)] == [
        f"row{n}" for n in range(1, 6)
    ]
    assert len(engine.loads) == 1


@pytest.mark.parametrize("order", [INTERLEAVED, BLOCKS], ids=["interleaved", "blocks"])
def test_one_card_group_with_room_for_one_model_runs_each_model_back_to_back(order: list[str]) -> None:
    loads, ran = play(order, groups=1, memory_gb_per_card=10)
    assert loads == 2 and ran["g0"] in ("a" * 10 + "b" * 10, "b" * 10 + "a" * 10)


def test_a_lone_card_group_gives_the_other_model_a_turn_within_three_swaps_time() -> None:
    # 200 jobs of a (1,000 s of work) queued before 5 of b: b does not wait for a's queue to drain,
    # only until its oldest job has waited 3 x (20 s load + 20 s reload); then a gets the group back.
    loads, ran = play(["a"] * 200 + ["b"] * 5, groups=1, memory_gb_per_card=10)
    order = ran["g0"]
    first_b = order.index("b")
    assert 0 < first_b <= 3 * 40 / 5 + 1  # a's jobs take 5 s each (the first after a 20 s load)
    assert order[first_b : first_b + 5] == "b" * 5 and order.count("b") == 5
    assert loads == 3  # a, b, a again
