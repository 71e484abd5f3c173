"""Reading request bodies safely: a size cap that holds for bodies sent without a length, and JSON
that is an object of ordinary values.

JSON is refused (400 ``invalid_json``) when it does not parse, nests too deeply for Python's parser
(``RecursionError``), uses ``NaN``/``Infinity`` (not JSON), or is not an object; a NUL character in
any key or text is refused (422 ``invalid_text``): PostgreSQL cannot store it, and no prompt needs it.
"""

from __future__ import annotations

import json
from typing import Any

from flask import Request
from werkzeug.exceptions import RequestEntityTooLarge

from jobservice.errors import DomainError, Invalid, Malformed

MAX_JSON_DEPTH = 32


def read_body(request: Request, *, limit: int, too_large: DomainError) -> bytes:
    """The request body, refused with ``too_large`` past ``limit`` bytes (before it is all read)."""
    if request.content_length is not None and request.content_length > limit:
        raise too_large
    app_limit = request.max_content_length
    # Also stops a body sent without a length (chunked); never raises the app's own limit.
    request.max_content_length = limit if app_limit is None else min(app_limit, limit)
    try:
        return request.get_data()
    except RequestEntityTooLarge:
        raise too_large from None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def json_object(raw: bytes) -> dict[str, Any]:
    """``raw`` parsed as a JSON object of ordinary values (see the module docstring)."""
    try:
        body = json.loads(raw, parse_constant=_not_json)
    except (ValueError, RecursionError):
        body = None
    if body is None:
        raise Malformed("invalid_json", "The request body is not valid JSON.")
    if not isinstance(body, dict):
        raise Malformed("invalid_json", "The request body must be a JSON object.")
    check_text(body)
    return body


def check_text(value: Any, where: str = "", depth: int = 0) -> None:
    """Refuse NUL characters in any key or text of ``value``, and nesting past ``MAX_JSON_DEPTH``."""
    if depth > MAX_JSON_DEPTH:
        raise Malformed("invalid_json", f"The request body is nested more than {MAX_JSON_DEPTH} levels deep.")
    if isinstance(value, str):
        if "\x00" in value:
            field = where or "(body)"
            raise Invalid("invalid_text", f"'{field}' contains a NUL character.", field=where or None)
    elif isinstance(value, dict):
        for key, item in value.items():
            name = f"{where}.{key}" if where else str(key)
            check_text(str(key), name.replace("\x00", "\\0"), depth + 1)
            check_text(item, name, depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_text(item, f"{where}[{index}]", depth + 1)
