"""Retry on a failed gate (jobservice.jobs.retries): what a submission may ask for, the seed of
each try, and what a deployment file sets."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobservice.db.tables import Job
from jobservice.errors import Invalid
from jobservice.families.deployment import load_deployment
from jobservice.families.reference import reference_specs
from jobservice.jobs import retries
from tests.fakes.zoo import specs as zoo_specs

ROOT = Path(__file__).resolve().parents[2]
T2V = next(s for s in reference_specs() if s.id == "reference-t2v")
NO_SEED = next(s for s in zoo_specs() if s.id == "fake-good")


@pytest.mark.parametrize("raw", [11, -1, "two", "1.5", True, 2.0, "٣", [1]])
def test_a_count_that_is_not_0_to_10_is_refused(raw: Any) -> None:
    with pytest.raises(Invalid) as refused:
        retries.requested_retries(T2V, raw, batch=False)
    assert refused.value.code == "invalid_retry" and refused.value.field == retries.FIELD


@pytest.mark.parametrize(("raw", "count"), [(None, None), ("", None), (0, 0), ("3", 3), (10, 10)])
def test_counts_from_json_and_forms(raw: Any, count: int | None) -> None:
    assert retries.requested_retries(T2V, raw, batch=False) == count


def test_a_model_without_a_seed_and_a_regression_batch_cannot_retry() -> None:
    with pytest.raises(Invalid) as no_seed:
        retries.requested_retries(NO_SEED, 2, batch=False)
    assert no_seed.value.code == "retry_needs_seed" and "fake-good" in no_seed.value.message
    with pytest.raises(Invalid) as batch:
        retries.requested_retries(T2V, 1, batch=True)
    assert batch.value.code == "retry_not_for_batches"
    assert retries.requested_retries(T2V, 0, batch=True) == 0  # asking for none is fine


def test_the_promise_is_the_jobs_own_else_the_models_default() -> None:
    spec = replace(T2V, retry_on_validation_failure=2)
    assert retries.resolved_retries(spec, None, batch=False) == 2
    assert retries.resolved_retries(spec, 0, batch=False) == 0
    assert retries.resolved_retries(spec, 5, batch=False) == 5
    assert retries.resolved_retries(spec, None, batch=True) == 0
    assert retries.resolved_retries(replace(NO_SEED, retry_on_validation_failure=2), None, batch=False) == 0


def test_each_try_runs_the_next_seed_and_wraps_at_2_to_the_32() -> None:
    job = Job(
        params={"seed": 2**32 - 1, "prompt": "x"}, retry_on_validation_failure=3, validation_attempts=[]
    )
    assert retries.run_params(job)["seed"] == 2**32 - 1 and retries.retries_left(job) == 3
    job.validation_attempts = [{"try": 1}, {"try": 2}]
    assert retries.run_params(job) == {"seed": 1, "prompt": "x"} and retries.retries_left(job) == 1
    assert job.params["seed"] == 2**32 - 1, "the request is not changed"
    assert retries.seed_of_try({"prompt": "x"}, 3) is None
    job.batch_id = uuid.uuid4()
    assert retries.retries_left(job) == 0


def test_a_deployment_sets_a_models_default_and_refuses_too_many(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "deploy" / "ascend-910b-8card.yaml").read_text())
    data["models"]["wan2.1-t2v-1.3b"]["retry_on_validation_failure"] = 2
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(data))
    spec = next(s for s in load_deployment(good).specs() if s.id == "wan2.1-t2v-1.3b")
    assert spec.retry_on_validation_failure == 2 and spec.describe()["retry_on_validation_failure"] == 2
    data["models"]["wan2.1-t2v-1.3b"]["retry_on_validation_failure"] = 11
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match="retry_on_validation_failure"):
        load_deployment(bad)
