"""``Client``: the Python client of the jobservice HTTP API."""

from __future__ import annotations

import time
from collections.abc import Callable

import requests

from jobservice.client.batches import BatchCalls
from jobservice.client.fleet import FleetCalls
from jobservice.client.groups import GroupCalls
from jobservice.client.http import Backoff, Transport
from jobservice.client.jobs import JobCalls
from jobservice.client.uploads import UploadCalls


class Client(JobCalls, BatchCalls, GroupCalls, FleetCalls, UploadCalls):
    """The API at ``base_url``; ``api_key`` defaults to JOBSERVICE_API_KEY (none: keys are off).

    ``timeout`` is the seconds one request may take (connecting, or between bytes of the answer);
    ``retries`` how often a request is repeated after a connection error, a 503 or a 429.
    """

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
        self.http = Transport(
            base_url,
            api_key,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            session=session,
            sleep=sleep,
        )

    @property
    def base_url(self) -> str:
        """The API's root URL, without a trailing slash."""
        return self.http.base_url

    def close(self) -> None:
        """Close the pooled connections."""
        self.http.session.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
