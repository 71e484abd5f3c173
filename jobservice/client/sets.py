"""What the client's calls of both kinds of set (``/batches``, ``/job-groups``) share: a set's view,
an action on it (cancel, resume), its jobs a page at a time, and waiting for it to end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from jobservice.client.follow import Target, follow, status_target
from jobservice.client.http import Transport

V = TypeVar("V", bound=BaseModel)


@dataclass(frozen=True)
class SetKind(Generic[V]):
    """One kind of set: where it lives (``root``), its view, the statuses it ends in and the code of
    its 404 (``missing``)."""

    root: str
    view: type[V]
    ended: frozenset[str]
    missing: frozenset[str]

    def target(self, set_id: str) -> Target[V]:
        """The set, as ``follow`` waits for it."""
        return status_target(f"{self.root}/{set_id}", self.view, ended=self.ended, missing=self.missing)

    def get(self, http: Transport, set_id: str, action: str | None = None) -> V:
        """``GET root/<id>``, or with ``action`` ``POST root/<id>/<action>``: the set's view."""
        if action is None:
            return self.view.model_validate(http.json("GET", f"{self.root}/{set_id}"))
        return self.view.model_validate(http.json("POST", f"{self.root}/{set_id}/{action}"))

    def jobs(self, http: Transport, set_id: str, page_size: int) -> Iterator[dict[str, Any]]:
        """Every job of the set in row order, fetched ``page_size`` at a time."""
        return http.all_jobs(f"{self.root}/{set_id}/jobs", page_size=page_size)

    def wait(
        self,
        http: Transport,
        set_id: str,
        timeout: float | None,
        on_update: Callable[[V], None] | None,
        stream: bool,
    ) -> V:
        """The set once it has ended: its ``/stream``, else polling."""
        return follow(http, self.target(set_id), timeout=timeout, on_update=on_update, use_stream=stream)
