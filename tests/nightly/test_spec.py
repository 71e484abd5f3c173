"""The batch spec: what parses, and a clear error naming the place for what does not."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from jobservice.nightly.spec import (
    MAX_SPEC_BYTES,
    SpecError,
    load_spec_file,
    parse_spec,
    parse_spec_text,
    resolve_under,
)

ROOT = Path(__file__).resolve().parents[2]

GOOD = """
name: nightly-test
repeat: 2
metrics: [generate_ms, {name: rtf, relative: 0.05}]
cases:
  - name: t2v-small
    model: reference-t2v
    params: {prompt: a kite, width: 64, height: 64}
    deterministic: true
    expect:
      duration_s: 3.0
      metrics: {rtf: {max: 20}}
  - name: face
    model: reference-talking-head
    inputs:
      image: ../samples/portrait.png
      audio: {key: fixtures/speech.wav}
    repeat: 1
"""


def test_a_good_spec_parses_with_defaults() -> None:
    loaded = parse_spec_text(GOOD, origin="test")
    spec = loaded.spec
    assert spec.name == "nightly-test" and spec.baseline == "auto"
    assert [m.name for m in spec.metrics] == ["generate_ms", "rtf"] and spec.metrics[1].relative == 0.05
    t2v, face = spec.cases
    assert spec.repeats_of(t2v) == 2 and spec.repeats_of(face) == 1
    assert (
        face.inputs["image"].path == "../samples/portrait.png"
        and face.inputs["audio"].key == "fixtures/speech.wav"
    )
    assert t2v.expect.validation == "passed" and t2v.expect.metrics["rtf"].max == 20
    assert len(loaded.digest) == 64


def test_the_digest_ignores_comments_and_layout() -> None:
    reformatted = "# a comment\n" + GOOD.replace(
        "params: {prompt: a kite, width: 64, height: 64}",
        "params:\n      prompt: a kite\n      width: 64\n      height: 64",
    )
    assert parse_spec_text(reformatted).digest == parse_spec_text(GOOD).digest
    assert parse_spec_text(GOOD.replace("a kite", "a boat")).digest != parse_spec_text(GOOD).digest


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("name: x\ncases: [", "line"),
        ("- a list", "mapping"),
        ("name: x\ncases: []", "cases"),
        ("name: 'bad name!'\ncases: [{name: a, model: m}]", "name"),
        ("name: x\ncases: [{name: a, model: m}, {name: a, model: m}]", "unique"),
        ("name: x\ncases: [{name: a, model: m, colour: red}]", "cases.0.colour"),
        ("name: x\ncases: [{name: a, model: m, repeat: 0}]", "cases.0.repeat"),
        ("name: x\nmetrics: [speed]\ncases: [{name: a, model: m}]", "unknown metric 'speed'"),
        ("name: x\ncases: [{name: a, model: m, inputs: {image: {path: a, key: b}}}]", "exactly one"),
        ("name: x\ncases: [{name: a, model: m, expect: {metrics: {rtf: {}}}}]", "min"),
        ("name: x\ncases: [{name: a, model: m, expect: {metrics: {rtf: {min: 3, max: 1}}}}]", "larger"),
    ],
)
def test_bad_specs_say_where(text: str, where: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec_text(text)
    described = caught.value.message + " ".join(d["field"] for d in caught.value.details)
    assert where in described, described


def test_spec_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no batch spec"):
        load_spec_file(tmp_path / "missing.yaml")
    path = tmp_path / "s.yaml"
    path.write_text(GOOD)
    loaded = load_spec_file(path)
    assert loaded.base_dir == tmp_path and loaded.origin == str(path)


def test_paths_cannot_leave_the_batch_root(tmp_path: Path) -> None:
    assert resolve_under(tmp_path, "a/b.png", what="x") == tmp_path / "a" / "b.png"
    assert (
        resolve_under(tmp_path, "../s/p.png", base=tmp_path / "specs", what="x") == tmp_path / "s" / "p.png"
    )
    for bad in ("/etc/passwd", "../outside.png", "a/../../x"):
        with pytest.raises(SpecError):
            resolve_under(tmp_path, bad, what="input")


def test_the_demo_spec_parses() -> None:
    loaded = load_spec_file(ROOT / "batches" / "nightly-reference.yaml")
    assert {c.model for c in loaded.spec.cases} == {"reference-t2v", "reference-talking-head"}


BOMB = "\n".join(
    ["name: bomb", 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8)]
    + ["cases: [{name: c, model: m, params: {p: *i}}]"]
)


def test_yaml_anchors_and_aliases_are_refused_before_they_expand() -> None:
    assert len(BOMB) < 500, "a few hundred bytes that expand to 9**9 strings"
    started = time.perf_counter()
    with pytest.raises(SpecError, match="YAML anchors and aliases are not allowed") as caught:
        parse_spec_text(BOMB)
    assert time.perf_counter() - started < 1.0
    assert "line 2" in caught.value.message, "it names the first anchor"
    merge = "base: &base {model: m}\nname: x\ncases: [{<<: *base, name: a}]"
    with pytest.raises(SpecError, match="anchors and aliases"):
        parse_spec_text(merge)


def test_deep_nesting_and_large_specs_are_refused(tmp_path: Path) -> None:
    deep = "name: x\ncases: [{name: a, model: m, params: {p: " + "[" * 40 + "]" * 40 + "}}]"
    with pytest.raises(SpecError, match="nested more than 32 levels"):
        parse_spec_text(deep)
    nested: dict[str, Any] = {}
    for _ in range(2000):  # deeper than Python's recursion limit
        nested = {"a": nested}
    with pytest.raises(SpecError, match="nested more than 32 levels"):
        parse_spec({"name": "x", "cases": [{"name": "a", "model": "m", "params": nested}]})
    big = tmp_path / "big.yaml"
    big.write_text(GOOD + "#" * MAX_SPEC_BYTES)
    with pytest.raises(SpecError, match="larger than 1024 KB"):
        load_spec_file(big)


@pytest.mark.parametrize("key", ["../x", "/etc/passwd", "a//b", "a/./b", "a\\b"])
def test_unsafe_object_keys_are_spec_errors(key: str) -> None:
    text = "name: x\ncases: [{name: a, model: m, inputs: {image: {key: 'KEY'}}}]".replace("KEY", key)
    with pytest.raises(SpecError) as caught:
        parse_spec_text(text)
    assert caught.value.details[0]["field"] == "cases.0.inputs.image.key"
