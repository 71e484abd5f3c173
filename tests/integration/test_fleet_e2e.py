"""The fleet end to end on the CPU: real workers obey what the simulator predicts.

Three card groups (three ``jobservice worker`` processes) declare 4 GB per card; two stand-in models
need 3 GB each and take ~2 s to load, so a group holds one of them at a time. A mixed queue goes
through them in two waves; every job must pass the gate, no group may ever hold more than fits, the
loads and swaps must be the ones ``scripts/bench_fleet.py``'s engine predicts for the same trace
(the production policy in virtual time), and every group's ledger must tile its wall time. Then a
worker is killed mid-job: its group goes down with nothing resident and the job runs again elsewhere.

The waves are sized so that every decision has a wide margin (a backlog at least twice what a swap
costs, or at most half), so the real timings, noisier than the trace's, cannot tip one.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from jobservice.db.tables import FleetEvent, FleetGroup, Job, JobUsage, LedgerSpan
from scripts.bench_lib.replay import figures, parse_trace, replay
from tests.browser.server import serve
from tests.integration.conftest import Stack, build_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GROUPS = ("g1", "g2", "g3")
A, B = "fake-heavy-a", "fake-heavy-b"
JOB = {"num_frames": 24, "fps": 12, "size": 32, "step_seconds": 0.03}  # 2 s of video, ~0.8 s of work
WAVE_1 = [B] * 90 + [A] * 3  # B's long queue takes all three groups; A's small one, queued after, needs one
WAVE_2 = [A] * 60  # then all three groups move to A


def trace_lines() -> list[str]:
    """The same fleet and queue as a trace (wave 2 long after wave 1 ends, as the test waits; the
    jobs of a wave one after another, as they are submitted: an interactive job takes a free group
    before the rest of its wave has arrived)."""
    header = {
        "fleet": [
            {
                "group": g,
                "cards": 1,
                "memory_gb_per_card": 4,
                "models": [A, B],
                "pinned": [A] if g == "g1" else [B],
            }
            for g in GROUPS
        ],
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
    # One request after another, as submit_wave sends them (a few ms each; well inside a 2 s load).
    jobs = [
        {"t": 0.01 * i, "model": m, "tenant": "default", "output_seconds": 2.0} for i, m in enumerate(WAVE_1)
    ]
    jobs += [
        {"t": 3600.0 + 0.01 * i, "model": m, "tenant": "default", "output_seconds": 2.0}
        for i, m in enumerate(WAVE_2)
    ]
    return [json.dumps(header), *(json.dumps(j) for j in jobs)]


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Stack]:
    stack = build_stack(tmp_path)
    for name in GROUPS:
        stack.start_worker(
            name,
            extra_env={"JOBSERVICE_WORKER_MEMORY_GB": "4", "JOBSERVICE_WORKER_MODELS": json.dumps([A, B])},
        )
    try:
        wait_for_groups(stack)
        yield stack
    finally:
        stack.close()


def group_id(name: str) -> str:
    return f"{name}@test"


def wait_for_groups(stack: Stack, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with stack.services.db.session() as s:
            rows = {g.id: g for g in s.scalars(select(FleetGroup))}
        if all(group_id(n) in rows and rows[group_id(n)].memory_gb_per_card == 4.0 for n in GROUPS):
            return
        time.sleep(0.2)
    raise AssertionError(
        "the three card groups did not register:\n" + "\n".join(w.log_text()[-2000:] for w in stack.workers)
    )


def submit_wave(stack: Stack, models: list[str]) -> list[str]:
    """One wave, submitted in one go (jobs that arrive together, like a batch's)."""
    return [stack.submit({"model": m, **JOB}) for m in models]


def wait_all(stack: Stack, ids: list[str], timeout: float = 300.0) -> list[Job]:
    deadline = time.monotonic() + timeout
    for job_id in ids:
        stack.wait(job_id, timeout=max(1.0, deadline - time.monotonic()))
    return [stack.job(j) for j in ids]


def events(stack: Stack) -> list[FleetEvent]:
    with stack.services.db.session() as s:
        return list(s.scalars(select(FleetEvent).order_by(FleetEvent.at, FleetEvent.id)))


def held_never_exceeds_memory(rows: list[FleetEvent]) -> None:
    held: dict[str, set[str]] = {}
    for event in rows:
        models = held.setdefault(event.group_id, set())
        if event.kind == "evict":
            models.discard(event.model)
        elif event.kind == "load":
            models.add(event.model)
            assert len(models) * 3 <= 4, f"{event.group_id} held {sorted(models)} at {event.at}"


def ledger_tiles_wall_time(stack: Stack) -> None:
    with stack.services.db.session() as s:
        for name in GROUPS:
            spans = list(
                s.scalars(
                    select(LedgerSpan).where(LedgerSpan.group_id == group_id(name)).order_by(LedgerSpan.id)
                )
            )
            assert spans and spans[-1].ended_at is None, name
            for before, after in zip(spans, spans[1:], strict=False):
                assert before.ended_at == after.started_at, (name, before.state, after.state)
            total = sum(
                ((sp.ended_at or spans[-1].started_at) - sp.started_at).total_seconds() for sp in spans
            )
            wall = (spans[-1].started_at - spans[0].started_at).total_seconds()
            assert total == pytest.approx(wall, abs=1e-3), name


def test_workers_hold_what_fits_and_swap_as_the_simulator_predicts(fleet: Stack) -> None:
    stack = fleet
    predicted = replay(parse_trace(trace_lines(), source="fleet-e2e"))
    wanted = Counter(load.model for load in predicted.engine.loads if load.cold)
    wanted_swaps = figures(predicted)["swaps"]

    first = wait_all(stack, submit_wave(stack, WAVE_1))
    second = wait_all(stack, submit_wave(stack, WAVE_2))
    for job in first + second:
        assert job.status == "succeeded", (job.id, job.error_code, job.error_message)
        assert job.verdict == "passed"
        assert job.usage is not None and job.usage["card_seconds"] > 0 and job.usage["attempts"] == 1

    rows = events(stack)
    loads = Counter(e.model for e in rows if e.kind == "load")
    swaps = len({(e.group_id, e.job_id) for e in rows if e.kind == "evict"})
    assert loads == wanted, f"loads {dict(loads)}, the simulator predicted {dict(wanted)}"
    assert swaps == wanted_swaps, f"{swaps} swaps, the simulator predicted {wanted_swaps}"
    held_never_exceeds_memory(rows)
    ledger_tiles_wall_time(stack)

    with stack.services.db.session() as s:
        groups = {g.id: g for g in s.scalars(select(FleetGroup))}
    assert all(list(groups[group_id(n)].resident) == [A] for n in GROUPS)  # the last wave moved all to A

    # Usage: every attempt charged, the sum of the jobs' usage equals the recorded rows.
    with stack.services.db.session() as s:
        charged = sum(u.card_seconds for u in s.scalars(select(JobUsage).where(JobUsage.charged.is_(True))))
    assert charged == pytest.approx(sum(j.usage["card_seconds"] for j in first + second if j.usage), abs=0.05)


def test_a_killed_workers_group_goes_down_and_its_job_runs_again(fleet: Stack) -> None:
    stack = fleet
    slow = {**JOB, "step_seconds": 0.5, "num_frames": 24}  # ~12 s: time to kill it mid-run
    job_id = stack.submit({"model": A, **slow})
    running = stack.wait(
        job_id, predicate=lambda j: j.status == "running" and j.stage == "generating", timeout=60
    )
    victim = next(
        w for w in stack.workers if running.worker_id and running.worker_id.startswith(f"{w.name}@")
    )
    victim.kill(signal.SIGKILL)

    done = stack.wait(job_id, timeout=120)
    assert done.status == "succeeded" and done.attempts == 2
    assert done.worker_id is not None and not done.worker_id.startswith(f"{victim.name}@")
    with stack.services.db.session() as s:
        dead = s.get(FleetGroup, group_id(victim.name))
        usage = list(
            s.scalars(select(JobUsage).where(JobUsage.job_id == uuid.UUID(job_id)).order_by(JobUsage.id))
        )
    assert dead is not None and dead.state == "down" and dead.resident == {} and dead.job_id is None
    assert [(u.outcome, u.charged) for u in usage] == [("worker_lost", False), ("succeeded", True)]
    assert done.usage is not None and done.usage["wasted_card_seconds"] > 0


def test_fleet_status_shows_residency_and_the_ledger(fleet: Stack) -> None:
    stack = fleet
    wait_all(stack, submit_wave(stack, [A, A, B]))
    answer = stack.client.get("/fleet")
    assert answer.status_code == 200, answer.get_data(as_text=True)
    body: dict[str, Any] = answer.get_json()
    by_id = {g["id"]: g for g in body["groups"]}
    assert set(by_id) == {group_id(n) for n in GROUPS}
    for group in by_id.values():
        assert group["online"] and group["memory_gb_per_card"] == 4.0
        assert sum(group["ledger_seconds"].values()) > 0
        assert len(group["resident"]) <= 1
    assert any(g["loads"] for g in by_id.values())
    models = {m["id"]: m for m in body["models"]}
    assert set(models[A]["eligible_groups"]) == set(by_id)

    # The same through the CLI, over HTTP, as an operator reads it.
    with serve(stack.services) as base:
        env = {**stack.env, "JOBSERVICE_URL": base}
        table = cli(env, "fleet", "status")
        usage = cli(env, "usage", "--group-by", "tenant,model", "--csv")
        as_json = json.loads(cli(env, "fleet", "status", "--json"))
    for name in GROUPS:
        assert group_id(name) in table
    assert "last 24 h:" in table and A in table
    assert usage.splitlines()[0].startswith("bucket,tenant,model,jobs,")
    assert {g["id"] for g in as_json["groups"]} == set(by_id)


def cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "jobservice.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
