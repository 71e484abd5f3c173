"""Reading request bodies safely: a size cap that holds for bodies sent without a length, and JSON
that is an object of ordinary values.

JSON is refused (400 ``invalid_json``) when it does not parse, nests too deeply for Python's parser
(``RecursionError``), uses ``NaN``/``Infinity`` (not JSON) or a number too large for a float
(``1e999``), or is not an object; a NUL character in any key or text is refused (422
``invalid_text``): PostgreSQL cannot store it, and no prompt needs it. The same NUL rule holds for
the path and query of every request (``refuse_nul_in_url``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
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
    # Also stops a body sent without a length (chunked); never raises the app's own limit. Werkzeug
    # cuts such a body at the limit without a word, so one byte more is read to tell.
    request.max_content_length = limit + 1 if app_limit is None else min(app_limit, limit + 1)
    try:
        data = request.get_data()
    except RequestEntityTooLarge:
        raise too_large from None
    if len(data) > limit:
        raise too_large
    return data


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses as infinity
        raise ValueError(f"{text[:20]} is out of range")
    return value


def json_object(raw: bytes) -> dict[str, Any]:
    """``raw`` parsed as a JSON object of ordinary values (see the module docstring)."""
    try:
        body = json.loads(raw, parse_constant=_not_json, parse_float=_finite)
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


def refuse_nul_in_url(path: str, args: Iterable[tuple[str, str]]) -> None:
    """400 ``invalid_text`` for a NUL character in the path or a query value (``args``: the query's
    pairs, decoded), a step of the request policy (``jobservice.http.api.policy.steps``).

    Query values reach database filters (PostgreSQL cannot hold a NUL even in a comparison), so one
    check for every route instead of one per filter.
    """
    # A cursor has its own stricter parser (and its own code, invalid_cursor).
    query = ((k, v) for k, v in args if k != "cursor")
    if "\x00" in path or any("\x00" in k + v for k, v in query):
        raise Malformed("invalid_text", "The address holds a NUL character; no path or filter needs one.")
