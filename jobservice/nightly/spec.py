"""The batch spec: a YAML file kept in a repository that names the cases of a nightly run.

Parsing only: models and parameters are checked against the catalog, and inputs by content, when
a batch is planned (``jobservice.nightly.plan``). Every problem becomes a ``SpecError`` naming
where in the file it is, which the API answers with a 422 and the CLI prints.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from jobservice.errors import pydantic_problems
from jobservice.nightly.figures import DEFAULT_METRICS, METRICS
from jobservice.storage import validate_key

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"
MAX_SPEC_BYTES = 1 << 20  # a spec text or file; far above any real one (200 cases at most)
MAX_SPEC_DEPTH = 32  # nesting of mappings and lists; deeper data would exhaust Python's recursion

# libyaml when it is installed: the pure-Python parser needs ~10 s of CPU for a 1 MB spec.
_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _SpecLoader(_BASE_LOADER):
    """The safe loader without YAML's implicit timestamps: a spec has no dates, and building one
    raises for an impossible date (2026-02-30); such a scalar stays text and is judged as text."""


_SpecLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _BASE_LOADER.yaml_implicit_resolvers.items()
}
_YAML_LOADER: Any = _SpecLoader


class SpecError(Exception):
    """A batch spec that cannot be run, with a sentence and per-field details."""

    def __init__(self, message: str, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InputRef(_Strict):
    """One input file: a local path (relative to the spec file) or an object-store key."""

    path: str | None = Field(default=None, min_length=1, max_length=1024)
    key: str | None = Field(default=None, min_length=1, max_length=1024)

    @field_validator("key")
    @classmethod
    def _safe_key(cls, value: str | None) -> str | None:
        # The object store refuses such keys only when asked for them; say so here, naming the field.
        return None if value is None else validate_key(value)

    @model_validator(mode="after")
    def _exactly_one(self) -> InputRef:
        if (self.path is None) == (self.key is None):
            raise ValueError("give exactly one of 'path' (a local file) or 'key' (an object-store key)")
        return self


class Bound(_Strict):
    """Absolute limits on a metric's median (either side optional)."""

    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Bound:
        if self.min is None and self.max is None:
            raise ValueError("give 'min', 'max' or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("'min' is larger than 'max'")
        return self


class Expectations(_Strict):
    """What every run of a case must satisfy, whatever the baseline says."""

    validation: Literal["passed", "any"] = Field(
        default="passed", description="passed: every run must pass the output gate."
    )
    duration_s: float | None = Field(default=None, gt=0, description="Expected media duration.")
    duration_tolerance_s: float = Field(default=0.15, ge=0)
    metrics: dict[str, Bound] = Field(default_factory=dict, description="Bounds on metric medians.")

    @field_validator("metrics")
    @classmethod
    def _known(cls, value: dict[str, Bound]) -> dict[str, Bound]:
        _check_metric_names(list(value))
        return value


K_REPLACED = (
    "'k' is no longer a setting: verdicts state their error rates instead (thresholds.alpha, 0.1 % false "
    "alarms per metric per night, and thresholds.ok_within, the slowdown an 'ok' rules out); remove 'k' "
    "(docs/nightly.md, How a run is judged)"
)


def _refuse_k(value: Any) -> Any:
    """A spec written for the k-standard-errors rule is refused, saying what replaced it."""
    if isinstance(value, dict) and "k" in value:
        raise PydanticCustomError("k_replaced", K_REPLACED)
    return value


class MetricChoice(_Strict):
    """A tracked metric, optionally with its own floor and ok bound."""

    name: str
    relative: float | None = Field(default=None, ge=0, le=1, description="Smallest change flagged.")
    ok_within: float | None = Field(
        default=None, gt=0, le=1, description="The slowdown an 'ok' verdict rules out (default: the spec's)."
    )

    @model_validator(mode="before")
    @classmethod
    def _no_k(cls, value: Any) -> Any:
        return _refuse_k(value)

    @field_validator("name")
    @classmethod
    def _known(cls, value: str) -> str:
        _check_metric_names([value])
        return value


class Thresholds(_Strict):
    """When a change of a median counts (docs/nightly.md): a regression beyond the noise at a false
    alarm rate of ``alpha`` per metric per night, and at least ``relative``; ``ok`` when a slowdown
    of ``ok_within`` is ruled out, wrongly at most ``alpha_ok`` of the time."""

    relative: float = Field(default=0.03, ge=0, le=1, description="The floor: the smallest change flagged.")
    alpha: float = Field(default=0.001, gt=0, le=0.2, description="False alarms per metric per night.")
    ok_within: float = Field(default=0.04, gt=0, le=1, description="The slowdown an 'ok' verdict rules out.")
    alpha_ok: float = Field(
        default=0.01, gt=0, le=0.5, description="How often 'ok' may be said of a slowdown of ok_within."
    )
    few_samples_relative: float = Field(
        default=0.10, ge=0, le=1, description="The floor used when the noise cannot be estimated."
    )

    @model_validator(mode="before")
    @classmethod
    def _no_k(cls, value: Any) -> Any:
        return _refuse_k(value)


class CaseSpec(_Strict):
    """One named case: a model, its parameters and inputs, how often to run it, what to expect."""

    name: str = Field(pattern=NAME_PATTERN)
    model: str = Field(min_length=1, max_length=128)
    params: dict[str, Any] = Field(default_factory=dict)
    inputs: dict[str, InputRef] = Field(default_factory=dict)
    repeat: int | None = Field(default=None, ge=1, le=50)
    deterministic: bool = Field(
        default=False, description="Same inputs give the same frames: a change of frames is a regression."
    )
    expect: Expectations = Field(default_factory=Expectations)

    @field_validator("inputs", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        # ``image: samples/portrait.png`` is short for ``image: {path: samples/portrait.png}``.
        if isinstance(value, dict):
            return {k: {"path": v} if isinstance(v, str) else v for k, v in value.items()}
        return value


class BatchSpec(_Strict):
    """A whole spec file."""

    name: str = Field(pattern=NAME_PATTERN, description="Runs with the same name form one history.")
    description: str = Field(default="", max_length=4000)
    baseline: str = Field(
        default="auto",
        description="auto (the pinned run, else the last good run), pinned, last_good, or a batch id.",
    )
    repeat: int = Field(default=3, ge=1, le=50, description="Runs of each case (a case may override).")
    undisturbed: bool = Field(
        default=True,
        description="Start each job only once its worker has finished its earlier jobs, so that none of "
        "the service's own work runs beside the measurement (jobservice/nightly/measure.py); false "
        "keeps the overlap for throughput.",
    )
    thresholds: Thresholds = Field(default_factory=Thresholds)
    metrics: list[MetricChoice] = Field(
        default_factory=lambda: [MetricChoice(name=m) for m in DEFAULT_METRICS]
    )
    primary: str = Field(
        default="generate_ms",
        description="The metric a case's verdict is (the others are compared and reported, and do not "
        "fail the batch); one of 'metrics'.",
    )
    assumed_drift: float | None = Field(
        default=None,
        ge=0,
        le=0.5,
        description="The drift between runs assumed until a case has 5 reference runs (relative sigma); "
        "default 0.02 on a CPU, 0.005 on a card.",
    )
    time_budget_s: float | None = Field(
        default=None,
        gt=0,
        description="Seconds from the batch's start after which no more repeats are added (adaptive "
        "repeats); default: no limit but 4 x a case's repeats.",
    )
    cases: list[CaseSpec] = Field(min_length=1, max_length=200)
    webhook: str | None = Field(default=None, description="Where to POST batch.start / batch.completed.")
    webhook_events_filter: list[str] | str | None = Field(default=None, description="start, completed.")

    @field_validator("metrics", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"name": v} if isinstance(v, str) else v for v in value]
        return value

    @model_validator(mode="after")
    def _unique(self) -> BatchSpec:
        names = [c.name for c in self.cases]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"case names must be unique; repeated: {', '.join(dupes)}")
        tracked = [m.name for m in self.metrics]
        if len(set(tracked)) != len(tracked):
            raise ValueError("a metric is listed twice under 'metrics'")
        if self.primary not in tracked:
            raise ValueError(f"'primary' ({self.primary}) must be one of the tracked 'metrics'")
        return self

    def repeats_of(self, case: CaseSpec) -> int:
        """How many times ``case`` runs."""
        return case.repeat or self.repeat


def _check_metric_names(names: list[str]) -> None:
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric '{unknown[0]}'; known: {', '.join(METRICS)}")


@dataclass(frozen=True)
class LoadedSpec:
    """A parsed spec, the text it came from, its digest, and where relative paths resolve."""

    spec: BatchSpec
    text: str
    digest: str
    origin: str
    base_dir: Path | None


def spec_digest(spec: BatchSpec) -> str:
    """sha256 of the spec's canonical JSON: comments and layout of the YAML do not change it."""
    data = spec.model_dump(mode="json")
    for name in ("webhook", "webhook_events_filter"):  # added later: a spec without them keeps its digest
        if data.get(name) is None:
            data.pop(name, None)
    if data.get("undisturbed") is True:  # added later, and the default
        data.pop("undisturbed")
    # Added with stated error rates: a spec that leaves them at their defaults keeps its digest.
    defaults: tuple[tuple[str, Any], ...] = (("primary", "generate_ms"), ("assumed_drift", None))
    for key, value in (*defaults, ("time_budget_s", None)):
        if data.get(key) == value:
            data.pop(key, None)
    thresholds = data.get("thresholds") or {}
    for key, value in (("alpha", 0.001), ("ok_within", 0.04), ("alpha_ok", 0.01)):
        if thresholds.get(key) == value:
            thresholds.pop(key)
    thresholds.setdefault("k", 3.0)  # the old default, so that an unchanged spec keeps its digest
    for metric in data.get("metrics") or []:
        if metric.get("ok_within") is None:
            metric.pop("ok_within", None)
        metric.setdefault("k", None)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def parse_spec(data: Any, *, text: str = "", origin: str = "", base_dir: Path | None = None) -> LoadedSpec:
    """Check an already-decoded spec (a dict, from YAML or JSON)."""
    if not isinstance(data, dict):
        raise SpecError("A batch spec must be a mapping with 'name' and 'cases'.")
    if _depth(data) > MAX_SPEC_DEPTH:
        raise SpecError(f"The batch spec is nested more than {MAX_SPEC_DEPTH} levels deep.")
    where, problem = _not_plain(data)
    if problem:
        message = f"The batch spec at '{where}' {problem}."
        raise SpecError(message, [{"field": where, "message": message, "type": "not_plain"}])
    try:
        spec = BatchSpec.model_validate(data)
    except ValidationError as exc:
        message, details = pydantic_problems(exc, root="(spec)")
        raise SpecError(f"Invalid batch spec at {message}", details) from None
    if not text:
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    return LoadedSpec(spec=spec, text=text, digest=spec_digest(spec), origin=origin, base_dir=base_dir)


def parse_spec_text(text: str, *, origin: str = "", base_dir: Path | None = None) -> LoadedSpec:
    """Parse YAML (or JSON, which is YAML) text into a checked spec."""
    if len(text.encode()) > MAX_SPEC_BYTES:
        raise SpecError(f"The batch spec is larger than {MAX_SPEC_BYTES // 1024} KB.")
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"The batch spec is not valid YAML{where}: {problem}.") from None
    except (ValueError, OverflowError, RecursionError) as exc:  # a scalar YAML cannot build
        raise SpecError(f"The batch spec holds a value that cannot be read: {exc}.") from None
    return parse_spec(data, text=text, origin=origin, base_dir=base_dir)


def load_yaml(text: str) -> Any:
    """Safe YAML without anchors and aliases, and nested at most ``MAX_SPEC_DEPTH`` deep.

    An alias repeats a node by reference, so a few hundred bytes of nested aliases expand to
    gigabytes once the spec is validated or hashed ("billion laughs"); a spec has no use for them.
    The events are checked before anything is built (a YAMLError names the place).
    """
    depth = 0
    for event in yaml.parse(text, Loader=_YAML_LOADER):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            problem = "YAML anchors and aliases are not allowed"
            raise yaml.MarkedYAMLError(problem=problem, problem_mark=event.start_mark)
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_SPEC_DEPTH:
                problem = f"nested more than {MAX_SPEC_DEPTH} levels deep"
                raise yaml.MarkedYAMLError(problem=problem, problem_mark=event.start_mark)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 - a safe loader (libyaml's or PyYAML's)


def load_spec_file(path: Path) -> LoadedSpec:
    """Read and check a spec file; local input paths resolve next to it."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_SPEC_BYTES + 1)
        if len(raw) > MAX_SPEC_BYTES:
            raise SpecError(f"The batch spec {path} is larger than {MAX_SPEC_BYTES // 1024} KB.")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise SpecError(f"There is no batch spec at {path}.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"The batch spec {path} cannot be read: {exc}.") from None
    return parse_spec_text(text, origin=str(path), base_dir=path.resolve().parent)


def _depth(data: Any) -> int:
    """How deeply mappings and lists nest in ``data`` (without recursion: it may be very deep)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, level)
            if level <= MAX_SPEC_DEPTH:
                stack.extend(
                    (child, level + 1) for child in (node.values() if isinstance(node, dict) else node)
                )
    return deepest


def resolve_under(
    root: Path, relative: str, *, what: str, base: Path | None = None, private: Sequence[Path] = ()
) -> Path:
    """``relative`` (to ``base``, default ``root``), refused if absolute, if it leaves ``root``, if it
    passes through a hidden entry (``.env``, ``.git``...), or if it lies in one of ``private``.

    Symbolic links are resolved first, so a link cannot lead out of the root or into a private folder.
    """
    candidate = Path(relative)
    if candidate.is_absolute():
        raise SpecError(f"The {what} '{relative}' must be a relative path.")
    resolved = ((base or root) / candidate).resolve()
    real_root = root.resolve()
    if not resolved.is_relative_to(real_root):
        raise SpecError(f"The {what} '{relative}' points outside the batch root ({root}).")
    if any(part.startswith(".") for part in resolved.relative_to(real_root).parts):
        raise SpecError(f"The {what} '{relative}' is hidden (a name starting with '.'); it cannot be used.")
    for folder in private:
        if resolved.is_relative_to(folder.resolve()):
            raise SpecError(f"The {what} '{relative}' is part of the service's own state; it cannot be used.")
    return resolved


_YAML_KINDS = {
    "bytes": "binary data (!!binary)",
    "set": "a set (!!set)",
    "tuple": "ordered pairs (!!omap, !!pairs)",
    "date": "a date",
    "datetime": "a date and time",
}


def _not_plain(data: Any) -> tuple[str, str]:
    """Where in ``data`` something is not plain JSON-like data, and what ("" when all is plain).

    A spec is mappings with text keys, lists, text, whole and finite numbers, booleans and nulls.
    YAML can build more (``!!binary`` bytes, ``!!set``, ``!!omap`` pairs, ``!!timestamp`` dates,
    ``.inf``/``.nan``, keys that are numbers); none of them means anything in a spec, and some break
    hashing or storing it later. A NUL character is refused too: PostgreSQL cannot store one.
    """
    stack: list[tuple[Any, str]] = [(data, "(spec)")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, dict):
            for key, item in node.items():
                name = str(key).replace("\x00", "\\0")[:100]
                if not isinstance(key, str) or "\x00" in key:
                    return where, f"holds the key {name!r}, which is not plain text"
                stack.append((item, name if where == "(spec)" else f"{where}.{name}"))
        elif isinstance(node, list):
            stack.extend((item, f"{where}[{index}]") for index, item in enumerate(node))
        elif isinstance(node, str):
            if "\x00" in node:
                return where, "contains a NUL character"
        elif isinstance(node, float):
            if not math.isfinite(node):
                return where, f"holds {node}, which is not a finite number"
        elif node is not None and not isinstance(node, bool | int):
            kind = _YAML_KINDS.get(type(node).__name__, f"a {type(node).__name__}")
            return where, f"holds {kind}, which a spec has no use for"
    return "", ""
