"""What running a model costs on this fleet: its footprint from the catalog, its speed and its cold
load from what the service measured (the deployment file's defaults until then).

Every finished generation adds a point (seconds of video, seconds of generation) to decayed sums per
model and card kind (``model_speeds``); the line through them is the model's speed (seconds per
second of video) and fixed cost per job. Every cold load moves an average of load times. The
dispatcher, the ETA forecast and ``/fleet`` read them back as the policy's ``ModelCost``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from jobservice.catalog import Catalog, ModelSpec
from jobservice.db.rows import insert_missing
from jobservice.db.tables import ModelSpeed, utcnow
from jobservice.fleet.policy import ModelCost

DECAY = 0.9  # each new sample weighs 1, the one before 0.9, ... (about the last 10 runs)
LOAD_WEIGHT = 0.3  # a new load time moves the average by this fraction
UNMEASURED_LOAD_S = 60.0  # the policy's guess for a model never loaded here and without a default
UNMEASURED_SPEED = 1.0  # likewise for its speed (its ETAs say they are guesses)
PER_RUN_MODES = frozenset({"subprocess", "http"})  # nothing stays resident on the worker's cards


@dataclass(frozen=True)
class Measured:
    """What the service knows of a model on one kind of card."""

    speed: float | None  # seconds of generation per second of output
    overhead_s: float
    load_s: float | None
    samples: float

    @property
    def known(self) -> bool:
        """Whether its speed comes from a measurement or a deployment default."""
        return self.speed is not None


def memory_gb(spec: ModelSpec) -> float:
    """Memory the model holds while resident or running, summed over its cards (0: not declared, or
    a server the operator runs elsewhere)."""
    if spec.min_memory_gb is None or spec.execution_mode == "http":
        return 0.0
    return spec.min_memory_gb * (spec.cards if spec.memory_scope == "per_card" else 1)


def per_run(spec: ModelSpec) -> bool:
    """Whether nothing of the model stays on the cards between jobs (a script per job, or a server
    the operator runs)."""
    return spec.execution_mode in PER_RUN_MODES


def output_seconds(spec: ModelSpec, params: Mapping[str, Any], inputs: Mapping[str, Any]) -> float | None:
    """Seconds of video a job will make: its speech's length for a talking head, frames over fps
    for text to video (``seconds`` where a model takes that instead); None when it cannot be told."""
    audio = inputs.get("audio") if isinstance(inputs.get("audio"), Mapping) else None
    if spec.task == "audio2video" and audio and isinstance(audio.get("duration_s"), int | float):
        return float(audio["duration_s"])
    frames, fps = params.get("num_frames"), params.get("fps")
    if isinstance(frames, int | float) and isinstance(fps, int | float) and fps > 0:
        return float(frames) / float(fps)
    seconds = params.get("seconds")
    if isinstance(seconds, int | float | str) and str(seconds).replace(".", "", 1).isdigit():
        return float(seconds)
    return None


def fit(row: ModelSpeed | None) -> tuple[float, float] | None:
    """(seconds per second of output, seconds per job) from the decayed sums; None: no sample."""
    if row is None or row.samples <= 0:
        return None
    n = row.samples
    mean_x, mean_y = row.sum_x / n, row.sum_y / n
    var = row.sum_xx / n - mean_x * mean_x
    if n >= 2.5 and var > 1e-6 * max(1.0, mean_x * mean_x):
        slope = (row.sum_xy / n - mean_x * mean_y) / var
        if slope >= 0:
            return slope, max(0.0, mean_y - slope * mean_x)
    if row.sum_x > 0:
        return row.sum_y / row.sum_x, 0.0  # one length seen: all of it speed, none fixed
    return 0.0, mean_y


def measured(spec: ModelSpec, row: ModelSpeed | None) -> Measured:
    """What is known of ``spec``: the measured line, else the deployment file's defaults."""
    line = fit(row)
    load = row.load_s if row is not None and row.loads else None
    if load is None:
        load = spec.load_seconds
    if line is None:
        return Measured(spec.seconds_per_output_second, 0.0, load, 0.0)
    return Measured(line[0], line[1], load, row.samples if row else 0.0)


def speeds(session: Session, kind: str | None = None) -> dict[tuple[str, str], ModelSpeed]:
    """Every measured (model, card kind), or those of one kind."""
    query = select(ModelSpeed)
    if kind is not None:
        query = query.where(ModelSpeed.card_kind == kind)
    return {(row.model, row.card_kind): row for row in session.scalars(query)}


def model_costs(
    catalog: Catalog, rows: Mapping[tuple[str, str], ModelSpeed], kind: str
) -> tuple[dict[str, ModelCost], dict[str, Measured]]:
    """Every catalog model as the policy sees it on ``kind`` cards, and what of it was measured."""
    costs: dict[str, ModelCost] = {}
    known: dict[str, Measured] = {}
    for spec in catalog.all():
        found = measured(spec, rows.get((spec.id, kind)))
        known[spec.id] = found
        costs[spec.id] = ModelCost(
            id=spec.id,
            cards=spec.cards,
            memory_gb=memory_gb(spec),
            load_s=0.0
            if per_run(spec)
            else (found.load_s if found.load_s is not None else UNMEASURED_LOAD_S),
            per_run=per_run(spec),
            speed=found.speed if found.speed is not None else UNMEASURED_SPEED,
            overhead_s=found.overhead_s,
        )
    return costs, known


def record_generation(session: Session, *, model: str, kind: str, output_s: float, generate_s: float) -> None:
    """Add one generation to the model's measured line."""
    row = _row(session, model, kind)
    row.samples = row.samples * DECAY + 1
    row.sum_x = row.sum_x * DECAY + output_s
    row.sum_y = row.sum_y * DECAY + generate_s
    row.sum_xx = row.sum_xx * DECAY + output_s * output_s
    row.sum_xy = row.sum_xy * DECAY + output_s * generate_s
    row.updated_at = utcnow()


def record_load(session: Session, *, model: str, kind: str, seconds: float) -> None:
    """Add one cold load to the model's measured load time."""
    row = _row(session, model, kind)
    row.load_s = (
        seconds if not row.loads or row.load_s is None else row.load_s + LOAD_WEIGHT * (seconds - row.load_s)
    )
    row.loads += 1
    row.updated_at = utcnow()


def _row(session: Session, model: str, kind: str) -> ModelSpeed:
    zero = {"samples": 0.0, "sum_x": 0.0, "sum_y": 0.0, "sum_xx": 0.0, "sum_xy": 0.0, "loads": 0}
    insert_missing(
        session,
        ModelSpeed,
        {"model": model, "card_kind": kind, "updated_at": utcnow(), **zero},
        ["model", "card_kind"],
    )
    # Locked on PostgreSQL: two workers finishing the same model at once add both their samples.
    query = select(ModelSpeed).where(ModelSpeed.model == model, ModelSpeed.card_kind == kind)
    row = session.scalar(query.with_for_update().execution_options(populate_existing=True))
    assert row is not None
    return row
