"""MkDocs hook: the configuration reference, rendered from the settings classes themselves.

``jobservice.settings.Settings`` is composed of one class per group (``GROUPS``: storage, queue,
API, workers, ...); this hook writes ``configuration-reference.md`` into the site as a generated
file, a section per group (its docstring, where it is defined) with a row per field: the
``JOBSERVICE_*`` variable, its type and limits, its default and its description. A setting cannot
be added without appearing here, nor documented with a default it does not have. It imports only
``jobservice.settings`` (pydantic), no service.
"""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

PAGE = "configuration-reference.md"
DOC_LINK = re.compile(r"docs/([\w-]+\.md(?:#[\w-]+)?)")
LIMITS = (
    (annotated_types.Ge, "ge", "≥"),
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Le, "le", "≤"),
    (annotated_types.Lt, "lt", "<"),
)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated reference page to the site's files."""
    root = Path(config.config_file_path).parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))  # this checkout's jobservice, even beside another install
    from jobservice.settings import ENV_PREFIX, GROUPS

    files.append(File.generated(config, PAGE, content=render(GROUPS, ENV_PREFIX)))
    return files


def render(groups: tuple[type[BaseModel], ...], prefix: str) -> str:
    """The whole page: an introduction, then a section and a table per group."""
    lines = [
        "# Configuration reference",
        "",
        "Generated at build time from the settings classes in `jobservice/settings/` (the fields of "
        "`Settings`, one class per group). Every variable can also be a line of `.env`; how values "
        "are written (lists, secrets, booleans) is on the [Configuration](configuration.md) page.",
        "",
    ]
    for group in groups:
        lines += _section(group, prefix)
    return "\n".join(lines) + "\n"


def _section(group: type[BaseModel], prefix: str) -> list[str]:
    title, _, about = (group.__doc__ or group.__name__).strip().partition("\n")
    module = group.__module__.replace(".", "/") + ".py"
    anchor = group.__module__.rsplit(".", 1)[-1]  # storage, queue, workers ...: stable link targets
    lines = [f"## {title.strip().rstrip('.')} {{#{anchor}}}", ""]
    if about.strip():
        lines += [_text(" ".join(about.split())), ""]
    lines += [
        f"Defined in `{module}` (`{group.__name__}`).",
        "",
        "| variable | type | default | description |",
        "| --- | --- | --- | --- |",
    ]
    for name, field in group.model_fields.items():
        lines.append(
            f"| `{prefix}{name.upper()}` | {_cell(_type(field))} | {_cell(_default(field))} | "
            f"{_cell(_text(field.description or ''))} |"
        )
    return [*lines, ""]


def _text(text: str) -> str:
    """Prose from the code: a mention of ``docs/<page>.md`` becomes a link the build checks."""
    return DOC_LINK.sub(lambda m: f"[{m.group(1).split('#')[0].removesuffix('.md')}]({m.group(1)})", text)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _type(field: FieldInfo) -> str:
    words = _annotation(field.annotation)
    limits = [
        f"{sign} {_number(getattr(item, attr))}"
        for item in field.metadata
        for kind, attr, sign in LIMITS
        if isinstance(item, kind)
    ]
    return f"{words} ({', '.join(limits)})" if limits else words


def _annotation(annotation: Any) -> str:
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Annotated:
        return _annotation(args[0])
    if origin in (Union, types.UnionType):
        kinds = [_annotation(a) for a in args if a is not type(None)]
        text = " or ".join(kinds)
        return f"{text}, optional" if type(None) in args else text
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin is list:
        return f"list of {_annotation(args[0])} (JSON)" if args else "list (JSON)"
    if origin is dict:
        return "object (JSON)"
    if annotation is SecretStr:
        return "secret string"
    if annotation is Path:
        return "path"
    if annotation is bool:
        return "boolean"
    if annotation is int:
        return "integer"
    if annotation is float:
        return "number"
    if annotation is str:
        return "string"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: FieldInfo) -> str:
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int | float):
        return f"`{_number(value)}`"
    if isinstance(value, list | dict):
        return f"`{json.dumps(value)}`"
    if isinstance(value, str) and not value:
        return '`""`'
    return f"`{value}`"


def _number(value: Any) -> str:
    return f"{value:.10g}" if isinstance(value, float) else str(value)
