"""The client's transport: one ``requests`` session, the API key, errors read from the JSON body,
and retries with backoff and jitter.

A request is retried on connection errors and on 503 and 429 answers, waiting what ``Retry-After``
asks when the server says, else an exponential backoff with jitter. A request that may have reached
the server (a reset connection, a read timeout) is retried only when repeating it is safe: reads,
and submissions that carry an ``Idempotency-Key`` (the server answers a replay with the first job).
"""

from __future__ import annotations

import email.utils
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import requests
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

RETRY_STATUSES = frozenset({429, 503})
Upload = str | Path | bytes | IO[bytes]


class ApiError(Exception):
    """A refusal from the API: its HTTP status and the ``{"error": {"code", "message"}}`` body."""

    def __init__(self, status: int, code: str, message: str, *, details: list[Any] | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or []

    @classmethod
    def from_response(cls, response: requests.Response) -> ApiError:
        """The error an answer of status >= 400 carries (its body may not be ours: a proxy's page)."""
        try:
            error = response.json()["error"]
            return cls(
                response.status_code,
                str(error["code"]),
                str(error["message"]),
                details=error.get("details") if isinstance(error.get("details"), list) else None,
            )
        except (ValueError, KeyError, TypeError):
            text = response.text[:300].strip()
            return cls(response.status_code, f"http_{response.status_code}", text or response.reason or "")


class WaitTimeout(TimeoutError):
    """``wait`` gave up: the job (or batch) had not ended when the timeout passed."""

    def __init__(self, message: str, last: Any = None) -> None:
        super().__init__(message)
        self.last = last  # the last view seen, when there was one


@dataclass
class Backoff:
    """Exponential backoff with jitter: ``base * 2**n`` capped at ``cap`` seconds, times 0.5..1."""

    base: float = 0.5
    cap: float = 10.0
    retry_after_cap: float = 120.0  # a Retry-After above this is clipped (a misconfigured proxy)
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        if retry_after is not None:
            # honour the server, spreading clients a little so they do not return all at once
            return min(retry_after, self.retry_after_cap) + self.rng.uniform(0, 0.1)
        return min(self.cap, self.base * 2**attempt) * self.rng.uniform(0.5, 1.0)


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds: a number of seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdecimal():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def never_sent(exc: requests.RequestException) -> bool:
    """True when the request cannot have reached the server (refused, unresolved, or timed out
    while connecting), so that repeating it is safe whatever it was."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(reason, NewConnectionError | ConnectTimeoutError)


def _opened(files: Mapping[str, tuple[str, Upload]]) -> dict[str, tuple[str, Any]]:
    """Multipart parts for one attempt: paths opened afresh, bytes as they are, streams rewound."""
    parts: dict[str, tuple[str, Any]] = {}
    for name, (filename, source) in files.items():
        if isinstance(source, str | Path):
            parts[name] = (filename, Path(source).read_bytes())
        elif isinstance(source, bytes):
            parts[name] = (filename, source)
        else:
            if source.seekable():
                source.seek(0)
            parts[name] = (filename, source)
    return parts


class Transport:
    """Requests to one API: base URL, bearer key, timeouts, retries."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: Backoff | None = None,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        key = api_key if api_key is not None else os.environ.get("JOBSERVICE_API_KEY", "")
        self.api_key = key.strip() or None
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff or Backoff()
        self.session = session or requests.Session()
        self.sleep = sleep

    def url(self, path: str) -> str:
        """An absolute URL for an API path (``/jobs/...``); absolute URLs pass through."""
        return path if "://" in path else f"{self.base_url}{path}"

    def headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The headers of every request: the bearer key when there is one, then ``extra``."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        headers.update(extra or {})
        return headers

    def send(
        self,
        method: str,
        path: str,
        *,
        repeatable: bool | None = None,
        files: Mapping[str, tuple[str, Upload]] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | tuple[float, float] | None = None,
        retries: int | None = None,
        **kwargs: Any,
    ) -> requests.Response:
        """Send with retries; the answer as it is (no status check). ``repeatable``: safe to repeat
        once it may have reached the server (default: GET, or a request with an Idempotency-Key);
        ``retries``: this request's own limit (default the transport's)."""
        if repeatable is None:
            repeatable = method == "GET" or "Idempotency-Key" in (headers or {})
        most = self.retries if retries is None else retries
        attempt = 0
        while True:
            try:
                response = self.session.request(
                    method,
                    self.url(path),
                    headers=self.headers(headers),
                    files=_opened(files) if files else None,
                    timeout=timeout if timeout is not None else self.timeout,
                    **kwargs,
                )
            except (requests.ConnectionError, requests.Timeout) as exc:
                if attempt >= most or not (repeatable or never_sent(exc)):
                    raise
                self.sleep(self.backoff.delay(attempt))
                attempt += 1
                continue
            if response.status_code not in RETRY_STATUSES or attempt >= most:
                return response
            wait = retry_after_seconds(response.headers.get("Retry-After"))
            response.close()
            self.sleep(self.backoff.delay(attempt, wait))
            attempt += 1

    def call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """``send``, raising ApiError for an answer of 400 or more."""
        response = self.send(method, path, **kwargs)
        if response.status_code >= 400:
            error = ApiError.from_response(response)
            response.close()
            raise error
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        """``call`` and the answer's JSON body."""
        return self.call(method, path, **kwargs).json()

    def all_jobs(self, path: str, *, page_size: int) -> Iterator[dict[str, Any]]:
        """Every job of a paged list (``GET path`` answering ``jobs`` and ``next_cursor``), fetched
        ``page_size`` at a time (a server without paging sends them all at once)."""
        query: dict[str, Any] = {"limit": page_size}
        while True:
            answer = self.json("GET", path, params=query)
            yield from answer["jobs"]
            if not answer.get("next_cursor"):
                return
            query["cursor"] = answer["next_cursor"]

    def save(self, path: str, dest: Path) -> Path:
        """Save what ``GET path`` answers to ``dest``, streamed through ``dest.part`` (so that a
        broken download leaves no file that looks whole)."""
        partial = dest.with_name(dest.name + ".part")
        with self.call("GET", path, stream=True, timeout=(self.timeout, 300)) as response:
            try:
                with partial.open("wb") as handle:
                    for block in response.iter_content(1 << 20):
                        handle.write(block)
            except BaseException:
                partial.unlink(missing_ok=True)
                raise
        partial.replace(dest)
        return dest
