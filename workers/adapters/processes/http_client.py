"""HTTP to model servers (vLLM-Omni, omnirt serve) with deadlines and clear job errors.

Every request has a timeout (a server that hangs must not hang the worker); answers that are not
successes become AdapterErrors with codes a user can act on: ``upstream_timeout`` (504, or no
answer in time), ``request_rejected`` (400/422: the server refused what we sent),
``out_of_memory`` (any answer that says so), ``instance_unreachable`` (connection refused) and
``upstream_error`` (anything else).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import requests

from workers.adapters.base import AdapterError
from workers.adapters.processes.memory import is_out_of_memory

CONNECT_TIMEOUT = 5.0


def make_session(api_key: str | None) -> requests.Session:
    """A session that sends ``Authorization: Bearer <api_key>`` when a key is configured."""
    session = requests.Session()
    if api_key:
        session.headers["Authorization"] = f"Bearer {api_key}"
    return session


def call(
    session: requests.Session, method: str, url: str, *, timeout: float, what: str, **kwargs: Any
) -> requests.Response:
    """One request with a connect and a read timeout; transport failures become job errors."""
    try:
        return session.request(
            method, url, timeout=(min(CONNECT_TIMEOUT, timeout), max(0.1, timeout)), **kwargs
        )
    except requests.ConnectionError as exc:
        raise AdapterError("instance_unreachable", f"{what}: cannot reach {url}: {_short(exc)}") from exc
    except requests.Timeout as exc:
        raise AdapterError("upstream_timeout", f"{what}: no answer from {url} within {timeout:g} s") from exc
    except requests.RequestException as exc:
        raise AdapterError("upstream_error", f"{what}: {url} failed: {_short(exc)}") from exc


def error_for(response: requests.Response, *, what: str) -> AdapterError:
    """The job error for a non-success answer."""
    detail = describe_body(response)
    status = response.status_code
    if is_out_of_memory(detail):
        return AdapterError("out_of_memory", f"{what} ran out of device memory ({status}): {detail}")
    if status == 504:
        return AdapterError("upstream_timeout", f"{what} gave up (504): {detail}")
    if status in (400, 409, 413, 422):
        return AdapterError("request_rejected", f"{what} refused the request ({status}): {detail}")
    return AdapterError("upstream_error", f"{what} answered {status}: {detail}")


def describe_body(response: requests.Response, limit: int = 800) -> str:
    """A short, readable form of an error body (JSON ``error.message``/``detail`` when present)."""
    text = response.text if response.content else ""
    try:
        body = json.loads(text)
    except ValueError:
        return text[:limit].strip() or response.reason or ""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:limit]
        for key in ("detail", "message", "error"):
            if body.get(key):
                return str(body[key])[:limit]
    return text[:limit]


def download(session: requests.Session, url: str, dest: Path, *, timeout: float, what: str) -> int:
    """Stream a response body to ``dest``; returns the bytes written."""
    response = call(session, "GET", url, timeout=timeout, what=what, stream=True)
    with response:
        if response.status_code != 200:
            raise error_for(response, what=what)
        written = 0
        with dest.open("wb") as out:
            for block in response.iter_content(1 << 20):
                out.write(block)
                written += len(block)
    return written


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
