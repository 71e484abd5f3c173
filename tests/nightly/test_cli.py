"""`jobservice batch ...` against a real Redis and SQLite: output, exit codes, clear errors."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from jobservice.cli.main import cli
from jobservice.db.tables import Batch, Job, JobGroup
from jobservice.nightly.plan import plan_batch
from jobservice.nightly.schedule import tick
from jobservice.nightly.service import create_batch
from jobservice.nightly.spec import parse_spec
from tests.nightly.helpers import batch_jobs, finish_jobs, spec, steady, t2v_case

pytestmark = pytest.mark.integration


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, bsettings: Any) -> Any:
    """The CLI reads JOBSERVICE_* like the service does: point it at the test stack."""
    monkeypatch.setenv("JOBSERVICE_VAR_DIR", str(bsettings.var_dir))
    monkeypatch.setenv("JOBSERVICE_DATABASE_URL", bsettings.resolved_database_url())
    monkeypatch.setenv("JOBSERVICE_BROKER_URL", bsettings.broker_url)
    return bsettings


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def write_spec(tmp_path: Path, body: dict[str, Any], name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(body))
    return path


def test_run_status_report_compare_pin(env: Any, bservices: Any, tmp_path: Path) -> None:
    path = write_spec(tmp_path, spec(t2v_case(repeat=3)))
    first = run("batch", "run", str(path))
    assert first.exit_code == 0, first.output
    assert "queueing 3 jobs" in first.output and "running" in first.output
    assert "warning: no worker is online for reference-t2v" in first.output
    first_id = re.search(r"batch ([0-9a-f-]{36})", first.output).group(1)  # type: ignore[union-attr]
    assert run("batch", "report", first_id).exit_code == 1
    finish_jobs(bservices, first_id, generate_ms=steady(1000, jitter=0.004))
    shown = run("batch", "status", first_id)
    assert shown.exit_code == 0 and "verdict no_baseline" in shown.output

    second = run("batch", "run", str(path), "--json")
    second_id = json.loads(second.output[second.output.index("{") :])["id"]
    finish_jobs(bservices, second_id, generate_ms=steady(1150, jitter=0.004))
    status = run("batch", "status", second_id, "--wait")
    assert status.exit_code == 1 and "REGRESSED" in status.output and "generate time +15.0%" in status.output
    assert f"if this is the new normal: jobservice batch pin {second_id}" in status.output
    assert "an unchanged batch reads regressed on at most 0.1 % of nights" in status.output

    gate = run("batch", "compare", first_id, second_id, "-v")
    assert gate.exit_code == 1 and "REGRESSED" in gate.output and "regression needs +" in gate.output
    # Two runs alone on a CPU host (2 % assumed between runs): even a run against itself cannot
    # rule out a 4 % slowdown. That is what the history of nights is for.
    itself = run("batch", "compare", first_id, first_id)
    assert itself.exit_code == 3 and "not ruled out" in itself.output
    out = tmp_path / "r.csv"
    assert run("batch", "report", second_id, "--format", "csv", "-o", str(out)).exit_code == 0
    assert out.read_text().splitlines()[1].startswith("t2v,reference-t2v,regressed")
    assert "# Batch nightly-test: REGRESSED" in run("batch", "report", second_id).output
    assert "is accepted as the new normal" in run("batch", "pin", first_id).output
    listed = run("batch", "list").output.splitlines()
    assert listed[0].startswith(second_id) and "pinned" in listed[1]


def test_an_inconclusive_run_has_its_own_exit_status_and_says_what_would_decide_it(
    env: Any, bservices: Any, tmp_path: Path
) -> None:
    """Three repeats with ~5 % noise: a 4 % slowdown cannot be ruled out. The gates exit 3, the
    reports put the case under "Could not tell" with the change not ruled out and what would
    decide it, and (inconclusive runs count) the run is the next one's baseline."""
    path = write_spec(tmp_path, spec(t2v_case(repeat=3)))
    first_id = json.loads((out := run("batch", "run", str(path), "--json").output)[out.index("{") :])["id"]
    finish_jobs(bservices, first_id, generate_ms=steady(1000, jitter=0.05))
    second = run("batch", "run", str(path), "--json").output
    second_id = json.loads(second[second.index("{") :])["id"]
    finish_jobs(bservices, second_id, generate_ms=steady(1020, jitter=0.05))

    status = run("batch", "status", second_id)
    assert status.exit_code == 3, status.output
    assert "verdict inconclusive" in status.output and "INCONCLUSIVE" in status.output
    assert "not ruled out; a regression needs" in status.output and "decide it" in status.output
    gate = run("batch", "compare", first_id, second_id, "-v")
    assert gate.exit_code == 3 and "not ruled out" in gate.output and "inconclusive" in gate.output
    markdown = run("batch", "report", second_id).output
    assert "# Batch nightly-test: INCONCLUSIVE" in markdown and "## Could not tell" in markdown
    assert "## Needs attention" not in markdown and " ?)" in markdown
    rows = run("batch", "report", second_id, "--format", "csv").output.splitlines()
    header = rows[0].split(",")
    assert rows[1].split(",")[header.index("generate_ms_verdict")] == "inconclusive"

    third = run("batch", "run", str(path), "--json").output
    third_id = json.loads(third[third.index("{") :])["id"]
    finish_jobs(bservices, third_id, generate_ms=steady(1000, jitter=0.001))
    assert f"baseline: {second_id}" in run("batch", "status", third_id).output
    with bservices.db.session() as session:
        assert str(session.get(Batch, uuid.UUID(third_id)).baseline_id) == second_id, "inconclusive counts"


@pytest.mark.parametrize(
    ("args", "says", "code"),
    [
        (("batch", "run", "missing.yaml"), "There is no batch spec", 2),  # a usage error, not a regression
        (("batch", "status", "nope"), "batch_not_found", 1),
        (("batch", "compare", str(uuid.uuid4()), str(uuid.uuid4())), "batch_not_found", 1),
        (("batch", "cancel", str(uuid.uuid4())), "batch_not_found", 1),
    ],
)
def test_clear_errors(env: Any, args: tuple[str, ...], says: str, code: int) -> None:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code and says in result.output and "Traceback" not in result.output


def test_bad_spec_file_names_the_field(env: Any, tmp_path: Path) -> None:
    path = write_spec(
        tmp_path, spec(t2v_case(repeat=0), t2v_case(name="b", params={"prompt": "x", "fps": 999}))
    )
    result = CliRunner().invoke(cli, ["batch", "run", str(path)])
    assert result.exit_code == 2 and "cases.0.repeat" in result.output, result.output
    path = write_spec(tmp_path, spec(t2v_case(params={"prompt": "x", "fps": 999})))
    result = CliRunner().invoke(cli, ["batch", "run", str(path)])
    assert result.exit_code == 2 and "case 't2v'" in result.output and "fps" in result.output


def test_a_spec_that_still_sets_k_is_refused_saying_what_replaced_it(env: Any, tmp_path: Path) -> None:
    for body in (
        spec(t2v_case(), thresholds={"relative": 0.03, "k": 3}),
        spec(t2v_case(), metrics=[{"name": "generate_ms", "k": 2}]),
    ):
        result = CliRunner().invoke(cli, ["batch", "run", str(write_spec(tmp_path, body))])
        assert result.exit_code == 2, result.output
        assert "'k' is no longer a setting" in result.output and "thresholds.alpha" in result.output
        assert "thresholds.ok_within" in result.output and "Traceback" not in result.output


def test_unmigrated_database_says_what_to_do(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JOBSERVICE_VAR_DIR", str(tmp_path))
    result = CliRunner().invoke(cli, ["batch", "list"])
    assert result.exit_code == 1 and "jobservice db upgrade" in result.output


def test_an_interrupted_creation_leaves_nothing_and_the_tick_finishes_batches(
    bservices: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jobservice.groups.service as groups

    def interrupted(*_: Any, **__: Any) -> None:
        raise KeyboardInterrupt  # the process dies while the jobs are being inserted

    two_cases = spec(t2v_case(repeat=3), t2v_case(name="b", repeat=2))
    with monkeypatch.context() as patch:
        patch.setattr(groups, "record_created_many", interrupted)
        with plan_batch(bservices, parse_spec(two_cases)) as plan:
            with pytest.raises(KeyboardInterrupt):
                create_batch(bservices, plan, source="beat")
    with bservices.db.session() as s:
        assert (s.query(Batch).count(), s.query(JobGroup).count(), s.query(Job).count()) == (0, 0, 0)
    assert not list(bservices.store.list("groups/")), "its stored inputs went with it"
    with plan_batch(bservices, parse_spec(two_cases)) as plan:
        batch, _ = create_batch(bservices, plan, source="beat")
    assert batch.status == "running" and len(batch_jobs(bservices, batch.id)) == 5
    assert tick(bservices) == {"finished": 0}
    finish_jobs(bservices, batch.id, generate_ms=steady(200))
    assert tick(bservices) == {"finished": 1}
    assert bservices.store.exists(f"groups/{batch.id}/report.csv")
