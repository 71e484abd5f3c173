"""The OpenAPI document and the app's URL map agree: every API route is described, nothing more."""

from __future__ import annotations

import re
from typing import Any

from jobservice.http.api.openapi import build_openapi

# Pages and their files are for browsers, not API clients.
UNDOCUMENTED = re.compile(r"^/$|^/ui(/|$)|^/static/")
IGNORED_METHODS = {"HEAD", "OPTIONS"}


def _openapi_path(rule: str) -> str:
    return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule)


def _routes(app: Any) -> set[tuple[str, str]]:
    return {
        (method.lower(), _openapi_path(rule.rule))
        for rule in app.url_map.iter_rules()
        if not UNDOCUMENTED.search(rule.rule)
        for method in rule.methods - IGNORED_METHODS
    }


def test_every_api_route_is_described_and_every_description_is_a_route(app: Any, client: Any) -> None:
    doc = client.get("/openapi.json").get_json()
    described = {(method, path) for path, ops in doc["paths"].items() for method in ops}
    routes = _routes(app)
    assert routes - described == set(), "routes missing from /openapi.json"
    assert described - routes == set(), "/openapi.json describes routes the app does not have"
    assert len(routes) >= 20


def test_path_parameters_match_the_rule(app: Any) -> None:
    doc = build_openapi(app.extensions["jobservice"].catalog)
    for path, ops in doc["paths"].items():
        named = set(re.findall(r"{([^}]+)}", path))
        for method, op in ops.items():
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == named, (method, path)


def test_refusals_share_the_error_shape_and_every_reference_resolves(app: Any) -> None:
    doc = build_openapi(app.extensions["jobservice"].catalog)
    schemas = doc["components"]["schemas"]
    refs = set(re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', str(doc).replace("'", '"')))
    assert refs and refs <= set(schemas), refs - set(schemas)
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op["summary"] and op["responses"], (method, path)
            for status, response in op["responses"].items():
                if status.startswith(("4", "5")) and "content" in response:
                    assert response["content"]["application/json"]["schema"] == {
                        "$ref": "#/components/schemas/Error"
                    }


def test_request_bodies_come_from_the_request_models(app: Any) -> None:
    doc = build_openapi(app.extensions["jobservice"].catalog)
    jobs = doc["paths"]["/jobs"]["post"]["requestBody"]["content"]
    assert jobs["application/json"]["schema"]["allOf"][0] == {"$ref": "#/components/schemas/JobCreate"}
    one_of = jobs["application/json"]["schema"]["allOf"][1]["oneOf"]
    assert {"$ref": "#/components/schemas/ReferenceT2VParams"} in one_of
    batches = doc["paths"]["/batches"]["post"]["requestBody"]["content"]["application/json"]
    assert batches["schema"] == {"$ref": "#/components/schemas/BatchCreate"}
    assert set(doc["components"]["schemas"]["BatchCreate"]["properties"]) == {
        "spec",
        "spec_yaml",
        "spec_path",
    }
