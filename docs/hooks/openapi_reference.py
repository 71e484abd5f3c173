"""MkDocs hook: the API reference page, rendered from the OpenAPI document the app serves.

``GET /openapi.json`` is ``jobservice.http.api.openapi.build_openapi(catalog)``; this hook calls the
same function with the built-in models' catalog (``build_catalog()``, no deployment file) and writes
``api-reference.md`` (and the document itself, ``openapi.json``) into the site as generated files, so
the reference can never drift from the code. It imports jobservice but needs no Redis, database or
object store: building the document reads only the route tables and the pydantic models.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

PAGE = "api-reference.md"
DOCUMENT = "openapi.json"
REF_PREFIX = "#/components/schemas/"
Schema = dict[str, Any]


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated reference page and the raw document to the site's files."""
    document = _document(Path(config.config_file_path).parent)
    files.append(File.generated(config, PAGE, content=render(document)))
    files.append(File.generated(config, DOCUMENT, content=json.dumps(document, indent=2)))
    return files


def _document(root: Path) -> Schema:
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))  # this checkout's jobservice, even beside another install
    from jobservice.families.deployment import build_catalog
    from jobservice.http.api.openapi import build_openapi

    return build_openapi(build_catalog())


def render(document: Schema) -> str:
    """The whole page: an introduction, every operation grouped by resource, every schema."""
    info = document["info"]
    lines = [
        "# API reference",
        "",
        f"Generated at build time from the OpenAPI {document['openapi']} document of jobservice "
        f"{info['version']} (`GET /openapi.json`; the same document as a file: "
        f"[openapi.json]({DOCUMENT})), with the built-in reference models' parameters. A deployment "
        "file adds its models' parameter schemas to the document a running service serves.",
        "",
    ]
    for group, operations in _groups(document["paths"]).items():
        lines += [f"## {group}", ""]
        for method, path, operation in operations:
            lines += _operation(method, path, operation)
    lines += ["## Schemas", ""]
    for name, schema in document["components"]["schemas"].items():
        lines += _schema_section(name, schema)
    return "\n".join(lines) + "\n"


def _groups(paths: dict[str, dict[str, Schema]]) -> dict[str, list[tuple[str, str, Schema]]]:
    groups: dict[str, list[tuple[str, str, Schema]]] = {}
    for path, methods in paths.items():
        first = path.strip("/").split("/")[0]
        group = {
            "jobs": "Jobs",
            "batches": "Batches",
            "v1": "OpenAI-compatible videos",
            "quota": "Tenants, fleet and usage",
            "fleet": "Tenants, fleet and usage",
            "usage": "Tenants, fleet and usage",
        }.get(first, "The service")
        groups.setdefault(group, []).extend((m, path, op) for m, op in methods.items())
    return groups


def _anchor(*parts: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _operation(method: str, path: str, operation: Schema) -> list[str]:
    lines = [f"### `{method.upper()} {path}` {{#{_anchor(method, path)}}}", "", operation["summary"], ""]
    parameters = operation.get("parameters", [])
    if parameters:
        lines += ["| parameter | in | type | required | description |", "| --- | --- | --- | --- | --- |"]
        for p in parameters:
            lines.append(
                f"| `{p['name']}` | {p['in']} | {_type(p.get('schema', {}))} | "
                f"{'yes' if p.get('required') else 'no'} | {_cell(p.get('description', ''))} |"
            )
        lines.append("")
    body = operation.get("requestBody")
    if body:
        lines += ["Request body:", ""]
        for media, content in body["content"].items():
            lines += _content(media, content.get("schema", {}))
    lines += ["| status | description | body |", "| --- | --- | --- |"]
    for status in sorted(operation["responses"]):
        response = operation["responses"][status]
        bodies = ", ".join(
            f"{media}: {_type(c['schema'])}" if c.get("schema") else media
            for media, c in response.get("content", {}).items()
        )
        lines.append(f"| {status} | {_cell(response['description'])} | {bodies} |")
    return [*lines, ""]


def _content(media: str, schema: Schema) -> list[str]:
    if schema.get("type") == "object" and "properties" in schema:
        return [f"- `{media}`, fields:", "", *_fields(schema, indent="    "), ""]
    return [f"- `{media}`: {_type(schema)}", ""]


def _schema_section(name: str, schema: Schema) -> list[str]:
    lines = [f"### {name} {{#{_anchor('schema', name)}}}", ""]
    if schema.get("description"):
        lines += [" ".join(schema["description"].split()), ""]
    if "properties" in schema:
        lines += _fields(schema)
    else:
        lines.append(f"Type: {_type(schema)}")
    return [*lines, ""]


def _fields(schema: Schema, indent: str = "") -> list[str]:
    required = set(schema.get("required", []))
    lines = [
        f"{indent}| field | type | required | description |",
        f"{indent}| --- | --- | --- | --- |",
    ]
    for field, sub in schema["properties"].items():
        about = sub.get("description", "")
        if "default" in sub:
            about = f"{about} Default: `{json.dumps(sub['default'])}`.".strip()
        lines.append(
            f"{indent}| `{field}` | {_type(sub)} | {'yes' if field in required else 'no'} | {_cell(about)} |"
        )
    return lines


def _type(schema: Schema) -> str:
    """A schema in a few words, with links to the named schemas it refers to."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix(REF_PREFIX)
        return f"[{name}](#{_anchor('schema', name)})"
    for key, joiner in (("anyOf", " or "), ("oneOf", " or "), ("allOf", " and ")):
        if key in schema:
            return joiner.join(_type(s) for s in schema[key])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " or ".join(_type({**schema, "type": k}) for k in kind)
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind is None:
        return "any"
    return f"{kind} ({schema['format']})" if "format" in schema else str(kind)
