"""Every model family's two sides agree: the API module that registers it, and its worker adapter.

Walks the registry (``jobservice.families``), so a family added later is checked without
editing this file.
"""

from __future__ import annotations

import importlib
import typing
from pathlib import Path

import pytest

from jobservice.catalog import ModelParams, ValidationPolicy
from jobservice.families import FAMILIES
from jobservice.families.deployment import load_deployment, with_known_backend
from jobservice.families.reference import reference_specs
from workers.adapters.base import Adapter

ROOT = Path(__file__).resolve().parents[2]


def _adapter_class(ref: str) -> type:
    module_name, _, class_name = ref.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def test_the_registry_holds_the_five_families() -> None:
    assert set(FAMILIES) == {"flashhead", "flashtalk", "omnirt", "vllm-omni", "diffusers"}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_family_has_an_importable_adapter_parameters_and_a_policy(name: str) -> None:
    family = FAMILIES[name]
    adapter = _adapter_class(family.adapter)
    assert issubclass(adapter, Adapter), f"{family.adapter} is not an Adapter"
    assert isinstance(family.policy, ValidationPolicy)
    assert family.task in {"audio2video", "text2video"}
    assert typing.get_args(family.entry.model_fields["backend"].annotation) == (name,)
    for task in ("audio2video", "text2video"):
        params = family.params(None, task)
        assert issubclass(params, ModelParams), params
        assert params.model_json_schema()["type"] == "object"
    for model_id in family.known_models:
        assert with_known_backend(model_id, {})["backend"] == name


def test_the_built_in_models_have_adapters_too() -> None:
    for spec in reference_specs():
        assert issubclass(_adapter_class(spec.adapter), Adapter)
        assert issubclass(spec.params, ModelParams)


@pytest.mark.parametrize("example", ["ascend-910b-8card.yaml", "cuda-2gpu.toml"])
def test_every_model_of_the_shipped_deployment_files_names_a_registered_family(example: str) -> None:
    deployment = load_deployment(ROOT / "deploy" / example)
    for spec in deployment.specs():
        assert spec.backend in FAMILIES
        assert spec.adapter == FAMILIES[spec.backend].adapter
