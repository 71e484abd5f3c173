"""A manifest checked row by row, exactly as ``POST /jobs`` checks one job, before anything exists.

Each row becomes a ``Submission`` (its ``model``/``task`` cells, its input references resolved to
checked files, every other cell a parameter) and goes through ``check_submission``: the model, the
parameters against the model's schema (defaults filled in, a seed drawn when absent), the webhook,
the retry count and the files. Every problem of every row is collected, named by row and column;
one problem anywhere refuses the whole manifest (422 ``invalid_manifest``, every problem in
``details``) and nothing is stored or recorded.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, NamedTuple

from jobservice.auth.principal import Principal
from jobservice.catalog import ModelSpec
from jobservice.errors import DomainError
from jobservice.groups.inputs import INPUT_COLUMNS, Resolver, input_identity
from jobservice.groups.manifest import Manifest, Problem, Row, refusal
from jobservice.jobs.submit import Submission, check_submission
from jobservice.media.uploads import CheckedUpload
from jobservice.wiring import Services

JOB_SOURCE = "group"  # the ``source`` of a group's jobs (the group itself records where it came from)
# The column a problem of these codes is about, when the problem names no field.
COLUMN_OF = {
    "unknown_model": "model",
    "model_task_mismatch": "model",
    "invalid_model": "model",
    "missing_task": "model",
    "invalid_task": "task",
}


class PlannedJob(NamedTuple):
    """One job to create, checked: its submission (inputs resolved), the model and parameters it
    resolved to (a manifest's row, a spec's case and repeat alike: what ``job_rows`` takes)."""

    submission: Submission
    spec: ModelSpec
    params: dict[str, Any]


@dataclass
class GroupPlan:
    """A manifest whose every row passed; holds the spool copies of its inputs until ``close``."""

    manifest: Manifest
    rows: list[PlannedJob]
    resolver: Resolver

    def close(self) -> None:
        """Delete the spool copies of the inputs."""
        self.resolver.close()

    def __enter__(self) -> GroupPlan:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def models(self) -> dict[str, int]:
        """Jobs per model, most first."""
        return dict(Counter(planned.spec.id for planned in self.rows).most_common())

    def inputs(self) -> dict[str, CheckedUpload]:
        """Every distinct input file the rows use (by content, or by upload), to store once for the group."""
        found: dict[str, CheckedUpload] = {}
        for planned in self.rows:
            for upload in planned.submission.uploads.values():
                found.setdefault(input_identity(upload), upload)
        return found


def check_rows(services: Services, manifest: Manifest, *, principal: Principal) -> GroupPlan:
    """Check every row of ``manifest`` for ``principal``: the plan, or 422 ``invalid_manifest``
    listing every problem (the rows' reading problems included)."""
    resolver = Resolver(services, principal)
    problems = list(manifest.problems)
    planned: list[PlannedJob] = []
    try:
        for row in manifest.rows:
            checked = check_row(services, resolver, row, principal=principal)
            if isinstance(checked, PlannedJob):
                planned.append(checked)
            else:
                problems += checked
        if problems:
            raise refusal(sorted(problems, key=lambda p: p.row))
    except BaseException:
        resolver.close()
        raise
    return GroupPlan(manifest=manifest, rows=planned, resolver=resolver)


def check_row(
    services: Services, resolver: Resolver, row: Row, *, principal: Principal
) -> PlannedJob | list[Problem]:
    """One row as ``POST /jobs`` would take it: its plan, or its problems."""
    values = dict(row.values)
    task, model = (_blank_as_none(values.pop(name, None)) for name in ("task", "model"))
    uploads: dict[str, CheckedUpload] = {}
    problems: list[Problem] = []
    for name in INPUT_COLUMNS:
        raw = _blank_as_none(values.pop(name, None))
        if raw is None:
            continue
        try:
            uploads[name] = resolver.resolve(name, raw)
        except DomainError as exc:
            problems.append(Problem(row.number, row.line, name, exc.code, exc.message))
    sub = Submission(
        task=task,
        model=model,
        params=values,
        uploads=uploads,
        source=JOB_SOURCE,
        principal=principal,
        group_row=row.number,
    )
    checked = check_submission(services, sub)
    reported = {p.column for p in problems}
    for refused in checked.problems:
        problems += [
            p for p in row_problems(row, refused) if not (p.code == "missing_input" and p.column in reported)
        ]
    if problems:
        return problems
    assert checked.spec is not None  # a submission without problems has a model
    return PlannedJob(sub, checked.spec, checked.params)


def row_problems(row: Row, exc: DomainError) -> list[Problem]:
    """A refusal of ``check_submission`` as problems of ``row``: one per detail that names a field
    (each invalid parameter, each missing file), else one for the refusal."""
    if exc.details and all(isinstance(d, dict) and "field" in d for d in exc.details):
        return [
            Problem(
                row.number,
                row.line,
                _column(str(d["field"])),
                exc.code,
                str(d.get("message") or exc.message),
            )
            for d in exc.details
        ]
    return [Problem(row.number, row.line, exc.field or COLUMN_OF.get(exc.code), exc.code, exc.message)]


def _column(field: str) -> str | None:
    """The column a detail's field is in (``width``, ``prompt``; ``(body)``: the row as a whole)."""
    return field.split(".", 1)[0] if field and not field.startswith("(") else None


def _blank_as_none(value: Any) -> Any:
    return None if value is None or (isinstance(value, str) and not value.strip()) else value
