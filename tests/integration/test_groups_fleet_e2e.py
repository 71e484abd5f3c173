"""A job group's models on ONE card group with room for one model at a time, end to end.

A real worker declares 4 GB on its one card; the zoo's two heavy stand-ins need 3 GB each and take
2 s to load, so it holds one at a time. A manifest interleaves them row by row. The fleet policy
(``jobservice.fleet.policy``, rule 2) does not swap away from a model that still has queued work
until it has held the group, and the other model's oldest job has waited, three times what the
swap costs (3 x (2 s + 2 s)); three rows of each take far less than that, so each model runs its
rows back to back: two loads for six jobs (a swap per job before this rule). The count is also
what the simulator predicts for the same fleet and queue (``scripts/bench_fleet.py``'s engine).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from jobservice.client import Client
from jobservice.db.tables import FleetEvent, FleetGroup, Job
from scripts.bench_lib.replay import parse_trace, replay
from tests.browser.server import serve
from tests.integration.conftest import Stack, build_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

A, B = "fake-heavy-a", "fake-heavy-b"
ROW = {"num_frames": 24, "fps": 12, "size": 32, "step_seconds": 0.03}  # 2 s of video, ~0.8 s of work
ORDER = [A, B] * 3


@pytest.fixture
def lone(tmp_path: Path) -> Iterator[tuple[Stack, str]]:
    stack = build_stack(tmp_path, stream_max_seconds=5.0, watch_interval_seconds=0.1)
    stack.start_worker(
        "lone", extra_env={"JOBSERVICE_WORKER_MEMORY_GB": "4", "JOBSERVICE_WORKER_MODELS": json.dumps([A, B])}
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with stack.services.db.session() as s:
                group = s.get(FleetGroup, "lone@test")
            if group is not None and group.memory_gb_per_card == 4.0:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the card group did not register:\n" + stack.workers[0].log_text()[-2000:])
        with serve(stack.services) as base:
            yield stack, base
    finally:
        stack.close()


def predicted_loads() -> Counter[str]:
    """What the simulator's engine (the production policy in virtual time) does with the same queue."""
    header = {
        "fleet": [{"group": "lone", "cards": 1, "memory_gb_per_card": 4, "models": [A, B], "pinned": [A]}],
        "models": {
            m: {
                "cards": 1,
                "memory_gb": 3,
                "load_s": 2.0,
                "seconds_per_output_second": 0.45,
                "per_run": False,
            }
            for m in (A, B)
        },
    }
    jobs = [
        {"t": 0.0, "model": m, "tenant": "default", "priority": "batch", "output_seconds": 2.0} for m in ORDER
    ]
    result = replay(parse_trace([json.dumps(header), *(json.dumps(j) for j in jobs)], source="lone"))
    return Counter(load.model for load in result.engine.loads if load.cold)


def test_a_lone_card_group_runs_each_model_of_a_manifest_back_to_back(lone: tuple[Stack, str]) -> None:
    stack, base = lone
    rows = "\n".join(json.dumps({"model": m, **ROW}) for m in ORDER) + "\n"
    with Client(base, timeout=60) as api:
        group = api.submit_group(rows.encode(), format="jsonl", name="two models, one card")
        final = api.wait_group(group.id, timeout=240)
    assert final.status == "finished" and final.progress.succeeded == len(ORDER), final

    with stack.services.db.session() as s:
        jobs = list(s.scalars(select(Job).where(Job.group_id == uuid.UUID(group.id))))
        loads = Counter(e.model for e in s.scalars(select(FleetEvent).where(FleetEvent.kind == "load")))
    ran = "".join(
        "a" if j.model == A else "b" for j in sorted(jobs, key=lambda j: (j.started_at, j.group_row))
    )
    assert ran in ("aaabbb", "bbbaaa"), f"the models ran in the order {ran}"
    assert loads == Counter({A: 1, B: 1}) == predicted_loads(), f"loads {dict(loads)}"
