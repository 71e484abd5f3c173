"""A spec checked against the catalog, with every input file content-checked like an upload.

Nothing is stored here: a spec with an unknown model, a bad parameter or an undecodable input is
refused (``SpecError``) before a batch row or a stored file exists. Inputs are copied into spool
files (hashing as they go) and put through the API's own upload checks (``check_image`` and
``check_audio``), so a batch input is held to exactly the rules of an uploaded one.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobservice.auth.principal import Principal
from jobservice.db.tables import Batch, utcnow
from jobservice.errors import DomainError
from jobservice.groups.inputs import check_local_file, input_identity, key_owner
from jobservice.jobs.submit import resolve_model, validate_params
from jobservice.media.uploads import CheckedUpload, SpoolFile
from jobservice.nightly.environment import creator_environment
from jobservice.nightly.spec import CaseSpec, LoadedSpec, SpecError, resolve_under
from jobservice.nightly.states import BatchStatus
from jobservice.settings import Settings
from jobservice.storage import ObjectNotFound
from jobservice.webhooks.targets import check_webhook, event_filter
from jobservice.wiring import Services


@dataclass
class PlannedCase:
    """One case, ready to submit: resolved parameters and checked inputs."""

    name: str
    model: str
    task: str
    params: dict[str, Any]
    repeat: int
    deterministic: bool
    expect: dict[str, Any]
    inputs: dict[str, CheckedUpload]
    sources: dict[str, str]  # where each input came from: "path:<...>" or "key:<...>"
    digest: str = ""

    def describe(self, input_keys: dict[str, str]) -> dict[str, Any]:
        """The case as stored with the batch (enough to resume it and to compare it)."""
        return {
            "name": self.name,
            "model": self.model,
            "task": self.task,
            "params": self.params,
            "repeat": self.repeat,
            "deterministic": self.deterministic,
            "expect": self.expect,
            "inputs": {
                name: {"key": input_keys.get(name), "source": self.sources[name], "meta": up.meta}
                for name, up in self.inputs.items()
            },
            "digest": self.digest,
        }


@dataclass
class Plan:
    """A checked spec; holds the spool files of its inputs until ``close``."""

    loaded: LoadedSpec
    cases: list[PlannedCase]
    tenant: str | None = None  # inputs given by store key must belong to it (None: an admin's)
    _spools: list[SpoolFile] = field(default_factory=list, repr=False)

    @property
    def size(self) -> int:
        """How many jobs the plan queues (cases x repeats)."""
        return sum(case.repeat for case in self.cases)

    def inputs(self) -> dict[str, CheckedUpload]:
        """Every distinct input file of the cases, by identity, to store once for the run."""
        return {input_identity(up): up for case in self.cases for up in case.inputs.values()}

    def resolved(self, stored: dict[str, str]) -> dict[str, Any]:
        """The spec as stored with the batch (``stored``: each input's identity -> its object key)."""
        spec = self.loaded.spec
        return {
            "name": spec.name,
            "description": spec.description,
            "baseline": spec.baseline,
            "thresholds": spec.thresholds.model_dump(mode="json"),
            "metrics": [m.model_dump(mode="json") for m in spec.metrics],
            "primary": spec.primary,
            "assumed_drift": spec.assumed_drift,
            "time_budget_s": spec.time_budget_s,
            "undisturbed": spec.undisturbed,  # read by workers (jobservice/nightly/measure.py)
            "cases": [
                case.describe({n: stored[input_identity(up)] for n, up in case.inputs.items()})
                for case in self.cases
            ],
        }

    def batch_row(
        self, batch_id: uuid.UUID, *, spec: dict[str, Any], source: str, key: str | None, principal: Principal
    ) -> Batch:
        """The new batch's row, running, with its resolved ``spec`` (``resolved``: inputs stored)."""
        loaded, now = self.loaded, utcnow()
        return Batch(
            id=batch_id,
            name=loaded.spec.name,
            spec_digest=loaded.digest,
            spec=spec,
            spec_text=loaded.text,
            origin=loaded.origin[:512],
            source=source,
            status=BatchStatus.RUNNING.value,
            pinned=False,
            total_jobs=self.size,
            idempotency_key=key,
            environment={"created_by": creator_environment()},
            results={},
            tenant=principal.tenant,
            submitted_by=principal.key_id,
            created_at=now,
            submitted_at=now,
            # Checked by plan_batch (jobservice.webhooks.targets).
            webhook_url=loaded.spec.webhook or None,
            webhook_events=event_filter(loaded.spec.webhook_events_filter or "start,completed")
            if loaded.spec.webhook
            else None,
        )

    def close(self) -> None:
        """Delete the spooled copies of the inputs."""
        for spool in self._spools:
            spool.close()
        self._spools.clear()

    def __enter__(self) -> Plan:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def case_digest(model: str, params: dict[str, Any], inputs: dict[str, CheckedUpload] | dict[str, str]) -> str:
    """What makes two runs of a case comparable: the model, resolved parameters, input contents."""
    digests = {
        name: (value.meta.get("sha256") if isinstance(value, CheckedUpload) else value)
        for name, value in sorted(inputs.items())
    }
    body = json.dumps({"model": model, "params": params, "inputs": digests}, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()


def stable_seed(case_name: str) -> int:
    """The seed a case gets when its spec gives none: the same every night."""
    return int(hashlib.sha256(case_name.encode()).hexdigest()[:8], 16)


def plan_batch(
    services: Services, loaded: LoadedSpec, *, confine_to: Path | None = None, tenant: str | None = None
) -> Plan:
    """Check every case of ``loaded``; local input paths resolve next to the spec file.

    ``confine_to`` (the API and the beat) refuses absolute paths and paths that leave that folder,
    which is also where paths resolve when the spec came without a file. ``tenant`` (a non-admin
    caller's) allows only store keys of that tenant's own jobs and batches as inputs.
    """
    spec = loaded.spec
    try:  # jobservice.webhooks.targets: https, or an allowed host; no private literal address
        check_webhook(spec.webhook, spec.webhook_events_filter, services.settings.webhook_allowed_hosts)
    except DomainError as exc:
        raise SpecError(f"webhook: {exc.message}") from None
    plan = Plan(loaded=loaded, cases=[], tenant=tenant)
    try:
        for case in loaded.spec.cases:
            plan.cases.append(_plan_case(services, plan, case, confine_to=confine_to))
    except BaseException:
        plan.close()
        raise
    return plan


def _plan_case(services: Services, plan: Plan, case: CaseSpec, *, confine_to: Path | None) -> PlannedCase:
    where = f"case '{case.name}'"
    try:
        model = resolve_model(services, None, case.model)
    except DomainError as exc:
        raise SpecError(f"{where}: {exc.message}") from None
    raw = dict(case.params)
    if "seed" in model.params.model_fields and raw.get("seed") is None:
        raw["seed"] = stable_seed(case.name)
    try:
        params = validate_params(model, raw)
    except DomainError as exc:
        details = [{**d, "field": f"cases.{case.name}.params.{d['field']}"} for d in exc.details]
        raise SpecError(f"{where}: {exc.message}", details) from None
    missing = [name for name in model.inputs if name not in case.inputs]
    if missing:
        raise SpecError(f"{where}: model '{model.id}' needs the input(s) {', '.join(missing)}.")
    extra = [name for name in case.inputs if name not in model.inputs]
    if extra:
        raise SpecError(f"{where}: model '{model.id}' takes no input '{extra[0]}'.")
    uploads: dict[str, CheckedUpload] = {}
    sources: dict[str, str] = {}
    for name, ref in case.inputs.items():
        if ref.path is not None:
            base = plan.loaded.base_dir or confine_to or Path.cwd()
            if confine_to is not None:
                what, private = f"{where} input '{name}'", private_paths(services.settings)
                path = resolve_under(confine_to, ref.path, base=base, what=what, private=private)
            else:
                path = (base / ref.path).resolve()  # an absolute path stays as it is
            sources[name] = f"path:{ref.path}"
            uploads[name] = _check_file(plan, name, path, services.settings, where=where)
        else:
            assert ref.key is not None
            sources[name] = f"key:{ref.key}"
            uploads[name] = _check_key(services, plan, name, ref.key, where=where)
    planned = PlannedCase(
        name=case.name,
        model=model.id,
        task=model.task,
        params=params,
        repeat=plan.loaded.spec.repeats_of(case),
        deterministic=case.deterministic,
        expect=case.expect.model_dump(mode="json"),
        inputs=uploads,
        sources=sources,
    )
    planned.digest = case_digest(model.id, params, uploads)
    return planned


def private_paths(settings: Settings) -> list[Path]:
    """What a spec read through the API or the beat may never name, as a spec or as an input: the
    service's own state (the var folder, object store, spool, scratch, SQLite file, secret key) and
    the deployment file (paths and endpoints of real models)."""
    paths = [settings.var_dir, settings.resolved_storage_root(), settings.resolved_spool_dir()]
    paths += [settings.resolved_scratch_dir(), settings.var_dir / "secret_key"]
    url = settings.resolved_database_url()
    if url.startswith("sqlite:///"):
        paths.append(Path(url.removeprefix("sqlite:///")))
    if settings.deployment_file is not None:
        paths.append(settings.deployment_file)
    return [path.resolve() for path in paths]


def _check_file(plan: Plan, name: str, path: Path, settings: Settings, *, where: str) -> CheckedUpload:
    if not path.is_file():
        raise SpecError(f"{where} input '{name}': there is no file at {path}.")
    try:
        return check_local_file(name, path, settings, keep=plan._spools)
    except DomainError as exc:
        if exc.status >= 500:
            raise
        raise SpecError(f"{where} input '{name}' ({path.name}): {exc.message}") from None
    except OSError as exc:
        raise SpecError(f"{where} input '{name}': {path} cannot be read ({exc}).") from None


def _check_key(services: Services, plan: Plan, name: str, key: str, *, where: str) -> CheckedUpload:
    if plan.tenant is not None and key_owner(services, key) != plan.tenant:
        # Another tenant's object and a missing one read the same: nothing to learn from the answer.
        raise SpecError(f"{where} input '{name}': there is no object '{key}' in the store.")
    with tempfile.TemporaryDirectory(dir=_spool_dir(services.settings), prefix="batch-key-") as tmp:
        try:
            local = services.store.get_file(key, Path(tmp) / "input")
        except ValueError as exc:  # an unsafe key (the spec refuses them too; this keeps it a 422)
            raise SpecError(f"{where} input '{name}': {exc}.") from None
        except ObjectNotFound:
            raise SpecError(f"{where} input '{name}': there is no object '{key}' in the store.") from None
        return _check_file(plan, name, local, services.settings, where=where)


def _spool_dir(settings: Settings) -> Path:
    folder = settings.resolved_spool_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return folder
