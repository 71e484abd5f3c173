"""Hostile batch specs: YAML that PyYAML would build into odd types or could not build at all, numbers
JSON has no room for, and paths that lead into the service's own state. The batch root of these
tests holds the var folder (``tests/unit/hostile.py``), the layout a careless default gives."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SAMPLES
from tests.unit.hostile import Case, assert_refused

CASE = "cases:\n - {name: a, model: reference-t2v, params: {prompt: x, num_frames: 9}}\n"
A2V = "cases:\n - {name: a, model: reference-talking-head, inputs: {image: %s, audio: %s}}\n"


def _yaml(text: str) -> Any:
    return lambda client: client.post("/batches", data=text.encode(), content_type="application/yaml")


def _json(body: dict[str, Any]) -> Any:
    return lambda client: client.post("/batches", json=body)


def _params(params: str) -> str:
    return f"name: x\ncases:\n - {{name: a, model: reference-t2v, params: {{{params}}}}}\n"


LAUGHS = "\n".join(
    ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8)]
)

CASES: dict[str, Case] = {
    # numbers: Python's int-str limit, floats past the range, infinities
    "a 5000-digit integer": (_yaml("name: x\nrepeat: " + "9" * 5000 + "\n" + CASE), 422, "invalid_spec"),
    "a 10**5000 seed": (_yaml(_params("prompt: x, seed: 1" + "0" * 5000)), 422, "invalid_spec"),
    ".inf in thresholds": (_yaml("name: x\nthresholds: {k: .inf}\n" + CASE), 422, "invalid_spec"),
    ".nan in a bound": (
        _yaml(
            "name: x\ncases:\n - {name: a, model: reference-t2v, params: {prompt: x},\n"
            "    expect: {metrics: {generate_ms: {min: .nan}}}}\n"
        ),
        422,
        "invalid_spec",
    ),
    "-.inf in params": (_yaml(_params("prompt: x, guidance_scale: -.inf")), 422, "invalid_spec"),
    "1e999 in a JSON spec": (
        lambda c: c.post(
            "/batches",
            data='{"spec": {"name": "x", "thresholds": {"k": 1e999}, "cases": []}}',
            content_type="application/json",
        ),
        400,
        "invalid_json",
    ),
    # tags that build something a spec has no use for
    "!!binary": (_yaml(_params("prompt: !!binary aGVsbG8=")), 422, "invalid_spec"),
    "!!binary that is not text": (_yaml(_params("prompt: x, extra: !!binary /w==")), 422, "invalid_spec"),
    "!!binary as spec_yaml": (
        _json({"spec_yaml": _params("prompt: x, extra: !!binary /w==")}),
        422,
        "invalid_spec",
    ),
    "!!set": (_yaml("name: x\ndescription: !!set {a, b}\n" + CASE), 422, "invalid_spec"),
    "!!omap": (
        _yaml(_params("prompt: x").replace("params: {prompt: x}", "params: !!omap [{prompt: x}]")),
        422,
        "invalid_spec",
    ),
    "!!pairs": (_yaml(_params("prompt: !!pairs [{a: 1}]")), 422, "invalid_spec"),
    "!!timestamp of an impossible date": (
        _yaml("name: x\ndescription: !!timestamp 2026-02-30\n" + CASE),
        422,
        "invalid_spec",
    ),
    "!!python/name": (_yaml("!!python/name:os.system\n"), 422, "invalid_spec"),
    "!!python/object/apply": (
        _yaml("name: !!python/object/apply:os.system [id]\n" + CASE),
        422,
        "invalid_spec",
    ),
    "a local tag": (_yaml("name: !shell x\n" + CASE), 422, "invalid_spec"),
    "!!int that is not one": (_yaml("name: x\nrepeat: !!int 0x\n" + CASE), 422, "invalid_spec"),
    "a number as a key": (_yaml(_params("prompt: x, 1: 2")), 422, "invalid_spec"),
    "a list as a key": (_yaml(_params("prompt: x, ? [a, b] : 1")), 422, "invalid_spec"),
    # shape
    "billion laughs": (_yaml(LAUGHS + "\nname: x\n" + CASE), 422, "invalid_spec"),
    "nested 10000 deep": (_yaml("[" * 10_000 + "]" * 10_000), 422, "invalid_spec"),
    "mappings 10000 deep": (_yaml("{a: " * 10_000 + "1" + "}" * 10_000), 422, "invalid_spec"),
    "two documents": (_yaml("name: x\n---\nname: y\n"), 422, "invalid_spec"),
    "not UTF-8": (
        lambda c: c.post("/batches", data=b"name: \xff\n", content_type="application/yaml"),
        400,
        "invalid_yaml",
    ),
    "YAML as text/plain": (
        lambda c: c.post("/batches", data="name: x\n" + CASE, content_type="text/plain"),
        415,
        "unsupported_media_type",
    ),
    "two ways to give a spec": (_json({"spec_yaml": "name: x", "spec_path": "x.yaml"}), 422, "invalid_spec"),
    # paths: out of the root, hidden, or into the service's own state
    "spec_path outside the root": (_json({"spec_path": "../../etc/passwd"}), 422, "invalid_spec"),
    "an absolute spec_path": (_json({"spec_path": "/etc/passwd"}), 422, "invalid_spec"),
    "spec_path of the secret key": (_json({"spec_path": "var/secret_key"}), 422, "invalid_spec"),
    "spec_path of the database": (_json({"spec_path": "var/jobservice.db"}), 422, "invalid_spec"),
    "spec_path of .env": (_json({"spec_path": ".env"}), 422, "invalid_spec"),
    "input from the var folder": (
        _yaml("name: x\n" + A2V % ("var/secret_key", "var/jobservice.db")),
        422,
        "invalid_spec",
    ),
    "input from the scratch folder": (
        _yaml("name: x\n" + A2V % ("var/scratch/face.png", "speech.wav")),
        422,
        "invalid_spec",
    ),
    "input through a link into var": (
        _yaml("name: x\n" + A2V % ("link/face.png", "speech.wav")),
        422,
        "invalid_spec",
    ),
    "input in a hidden folder": (
        _yaml("name: x\n" + A2V % (".git/face.png", "speech.wav")),
        422,
        "invalid_spec",
    ),
    "input of a key outside jobs": (
        _yaml(
            "name: x\ncases:\n - {name: a, model: reference-talking-head,\n"
            "    inputs: {image: {key: ../var/secret_key}, audio: {key: x}}}\n"
        ),
        422,
        "invalid_spec",
    ),
}


def _plant(root: Path) -> None:
    """Readable files where a hostile spec would look: a valid PNG in the worker's scratch folder and
    in .git, a link into var, a .env that parses as a spec."""
    from tests.unit.test_api import png_bytes

    (root / "var" / "scratch").mkdir(parents=True, exist_ok=True)
    (root / "var" / "scratch" / "face.png").write_bytes(png_bytes())
    (root / ".env").write_text("name: leaked\n" + CASE)
    (root / ".git").mkdir(exist_ok=True)
    (root / ".git" / "face.png").write_bytes(png_bytes())
    shutil.copy(SAMPLES / "speech.wav", root / "speech.wav")
    os.symlink(root / "var" / "scratch", root / "link")


@pytest.mark.parametrize("name", list(CASES))
def test_a_hostile_spec_is_refused_and_leaves_nothing(hostile: Any, name: str) -> None:
    client, services = hostile
    _plant(services.settings.batch_root)
    assert_refused(client, services, CASES[name])


def test_a_spec_in_the_root_still_runs_with_inputs_beside_it(hostile: Any) -> None:
    from tests.unit.test_api import png_bytes

    client, services = hostile
    root = services.settings.batch_root
    (root / "specs").mkdir()
    (root / "specs" / "n.yaml").write_text("name: n\n" + CASE)
    (root / "face.png").write_bytes(png_bytes())
    response = client.post("/batches", json={"spec_path": "specs/n.yaml"})
    assert response.status_code == 202, response.get_data(as_text=True)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"spec_path": "var/secret_key"}, "own state"),
        ({"spec_path": "var/jobservice.db"}, "own state"),
        ({"spec_path": ".env"}, "hidden"),
        ({"spec_yaml": "name: x\n" + A2V % ("link/face.png", "speech.wav")}, "own state"),
    ],
)
def test_a_private_path_is_refused_for_what_it_is(hostile: Any, body: dict[str, Any], words: str) -> None:
    client, services = hostile
    _plant(services.settings.batch_root)
    response = client.post("/batches", json=body)
    assert response.status_code == 422 and words in response.get_json()["error"]["message"], (
        response.get_json()
    )
