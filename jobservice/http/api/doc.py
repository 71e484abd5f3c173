"""The vocabulary of the route tables that ``/openapi.json`` is built from.

Each operation is declared once, on its view: ``@api.route("get", "/jobs/{job_id}", "A job",
responses=...)`` (``api`` being the blueprint's ``RouteTable``) registers the view with Flask and
describes it for the document, so a route cannot exist undescribed, nor be described and not exist.
``jobservice.http.api.openapi`` turns the tables into the document; ``tests/unit/test_openapi_routes.py``
still checks that the document and the app's URL map agree.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from flask import Blueprint

from jobservice.catalog import Catalog

REF = "#/components/schemas/{model}"
Schema = dict[str, Any]


@dataclass(frozen=True)
class Route:
    """One documented operation. ``body`` builds the request body's content from the catalog, since
    a model's parameters are known only at run time (deployment files add models)."""

    method: str
    path: str  # OpenAPI form: /jobs/{job_id}
    summary: str
    responses: dict[str, Schema]
    parameters: tuple[Schema, ...] = ()
    body: Callable[[Catalog], Schema] | None = None

    def operation(self, catalog: Catalog) -> Schema:
        """The OpenAPI operation object."""
        op: Schema = {"summary": self.summary}
        if self.parameters:
            op["parameters"] = list(self.parameters)
        if self.body is not None:
            op["requestBody"] = {"required": True, "content": self.body(catalog)}
        op["responses"] = {**every_operation(), **self.responses}
        return op


View = TypeVar("View", bound=Callable[..., Any])


class RouteTable:
    """The documented operations of one blueprint, in the order they are declared."""

    def __init__(self, blueprint: Blueprint) -> None:
        self.blueprint = blueprint
        self.routes: list[Route] = []

    def route(
        self,
        method: str,
        path: str,
        summary: str,
        *,
        responses: dict[str, Schema],
        parameters: tuple[Schema, ...] = (),
        body: Callable[[Catalog], Schema] | None = None,
    ) -> Callable[[View], View]:
        """Register the decorated view for ``method path`` (OpenAPI form, the blueprint's prefix
        included) and describe it."""
        prefix = self.blueprint.url_prefix or ""
        if not path.startswith(prefix):
            raise ValueError(f"{path} is outside the blueprint's prefix {prefix}")
        rule = re.sub(r"{([^{}]+)}", r"<\1>", path[len(prefix) :])
        described = Route(method, path, summary, responses, parameters, body)

        def register(view: View) -> View:
            self.blueprint.add_url_rule(rule, view_func=view, methods=[method.upper()])
            self.routes.append(described)
            return view

        return register


def path_parameter(path: str) -> str:
    """The one ``{name}`` of an OpenAPI ``path`` (``/batches/{batch_id}/stream`` -> ``batch_id``)."""
    (name,) = re.findall(r"{([^{}]+)}", path)
    return name


def ref(model: str) -> Schema:
    """A reference to a schema in ``components``."""
    return {"$ref": REF.format(model=model)}


def answer(description: str, model: str | None = None) -> Schema:
    """A response, with a JSON body of ``model`` when given."""
    if model is None:
        return {"description": description}
    return {"description": description, "content": {"application/json": {"schema": ref(model)}}}


def follow(*targets: tuple[str, str], **parameters: str) -> Schema:
    """OpenAPI links from a response to the operations (method, path) its values lead to, e.g.
    ``follow(("get", "/jobs/{job_id}"), job_id="$response.body#/id")``: what a client (and the
    stateful fuzzer) does next with the answer."""
    links = {}
    for method, path in targets:
        pointer = path.replace("~", "~0").replace("/", "~1")
        name = method + "".join(part.strip("{}").title() for part in path.split("/")).replace("_", "")
        links[name] = {"operationRef": f"#/paths/{pointer}/{method}", "parameters": dict(parameters)}
    return {"links": links}


def refused(description: str) -> Schema:
    """An error response: the ``Error`` shape every refusal has."""
    return answer(description, "Error")


def every_operation() -> dict[str, Schema]:
    """What any operation may answer before its own code runs (``cross_site``, ``bodies``)."""
    return {
        "400": refused(
            "A malformed request, e.g. a NUL character in the path or query (invalid_text), or a "
            "malformed X-Request-Id (invalid_request_id)."
        ),
        "421": refused(
            "A Host this service does not answer for (host_not_allowed; JOBSERVICE_ALLOWED_HOSTS)."
        ),
        "401": refused(
            "No valid API key (unauthorized): send `Authorization: Bearer <key>` when JOBSERVICE_AUTH=keys."
        ),
        "429": refused(
            "Over the key's request rate (rate_limited) or a tenant quota (quota_exceeded); see Retry-After."
        ),
    }


def in_path(name: str) -> Schema:
    """A UUID path parameter."""
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}


def in_query(name: str, schema: Schema | None = None, **extra: Any) -> Schema:
    """A query parameter (a string unless ``schema`` says otherwise)."""
    return {"name": name, "in": "query", "schema": schema or {"type": "string"}, **extra}


def idempotency_key(schema: Schema) -> Schema:
    """The optional ``Idempotency-Key`` header of a create."""
    return {"name": "Idempotency-Key", "in": "header", "required": False, "schema": schema}
