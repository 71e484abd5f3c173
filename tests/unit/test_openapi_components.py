"""Each OpenAPI component is defined once: a job group and a card group never share a schema's name."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from jobservice.http.api import openapi
from jobservice.http.api.openapi import MODELS, build_openapi


def _definitions(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template=openapi.REF)
    return {**schema.pop("$defs", {}), model.__name__: schema}


def test_no_component_is_defined_twice(app: Any) -> None:
    catalog = app.extensions["jobservice"].catalog
    models = (*MODELS, *(spec.params for spec in catalog.all()))
    seen: dict[str, tuple[str, Any]] = {}
    for model in models:
        for name, schema in _definitions(model).items():
            first = seen.setdefault(name, (model.__qualname__, schema))
            assert first[1] == schema, (
                f"{name} is defined by {first[0]} and, differently, by {model.__qualname__}"
            )
    assert build_openapi(catalog)["components"]["schemas"].keys() == {"Error", *seen}


def test_a_second_definition_under_one_name_is_refused() -> None:
    components: dict[str, Any] = {}
    openapi._define(components, "GroupView", {"type": "object"})
    openapi._define(components, "GroupView", {"type": "object"})  # the same schema again is one
    with pytest.raises(ValueError, match="GroupView"):
        openapi._define(components, "GroupView", {"type": "string"})


def test_job_groups_answer_with_the_job_groups_view_and_fleet_with_the_card_groups(app: Any) -> None:
    doc = build_openapi(app.extensions["jobservice"].catalog)
    schemas = doc["components"]["schemas"]

    def answered(path: str, method: str, status: str) -> dict[str, Any]:
        ref = doc["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]["$ref"]
        return schemas[ref.rsplit("/", 1)[-1]]

    for path, method, status in (
        ("/job-groups", "post", "202"),
        ("/job-groups/{group_id}", "get", "200"),
        ("/job-groups/{group_id}/cancel", "post", "202"),
    ):
        assert "manifest_sha256" in answered(path, method, status)["properties"], path
    fleet = answered("/fleet", "get", "200")
    card_group = fleet["properties"]["groups"]["items"]["$ref"].rsplit("/", 1)[-1]
    assert card_group == "CardGroupView" and "manifest_sha256" not in schemas[card_group]["properties"]
