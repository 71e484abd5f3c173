"""What the routes of a set of jobs (``/batches``, ``/job-groups``) share: a list's ``limit``, the
refusals and the answer of a creation, and the reads every set answers alike (``SetRoutes``: the
set itself, its jobs a page at a time, cancel), declared once for both kinds."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from flask import Response, jsonify, request
from sqlalchemy.orm import Session

from jobservice.db.tables import Job
from jobservice.errors import Invalid
from jobservice.fleet.eta import latest as latest_forecast
from jobservice.groups.presenters import group_jobs_page
from jobservice.groups.service import refresh_etas
from jobservice.http.api.doc import (
    RouteTable,
    Schema,
    answer,
    idempotency_key,
    in_path,
    in_query,
    path_parameter,
    ref,
    refused,
)
from jobservice.http.api.native.jobs import services
from jobservice.http.api.policy.auth import current_principal
from jobservice.jobs.presenters import JobList, job_views
from jobservice.wiring import Services

BAD_CURSOR = refused("A cursor this API did not make (invalid_cursor).")
# A creation's refusals whatever the set is made of (a spec, a manifest).
UNAVAILABLE = {
    "503": refused("A dependency is unavailable."),
    "507": refused("Too little free space in the store or spool (insufficient_storage)."),
}


CREATION_KEY = idempotency_key({"type": "string", "minLength": 1, "maxLength": 255})


def creation_responses(view: str, created: str, replay: str, refusals: dict[str, str]) -> dict[str, Schema]:
    """What a set's creation answers: 202 with the new set (``created``), 200 with the set an
    Idempotency-Key already made (``replay``), the refusals by status, and the store's."""
    return {
        "202": answer(created, view),
        "200": answer(replay, view),
        **{status: refused(text) for status, text in refusals.items()},
        **UNAVAILABLE,
    }


def parse_limit(raw: str, *, most: int = 100) -> int:
    """A list's ``?limit=``: a whole number from 1 to ``most``, else a 422."""
    limit = int(raw) if raw.isdecimal() and len(raw) <= 6 else 0  # isdigit() would accept "²"
    if not 1 <= limit <= most:
        raise Invalid("invalid_limit", f"limit must be a whole number from 1 to {most}.")
    return limit


def jobs_page_parameters(id_name: str, *, default_limit: int | None = None) -> tuple[Schema, ...]:
    """The parameters of a set's ``/jobs``: its id, ``limit`` (1 to 1000) and ``cursor``."""
    limit: Schema = {"type": "integer", "minimum": 1, "maximum": 1000}
    if default_limit is not None:
        limit["default"] = default_limit
    return (in_path(id_name), in_query("limit", limit), in_query("cursor"))


def answer_created(
    response: Response, services: Services, set_id: uuid.UUID, *, location: str, created: bool
) -> Response:
    """The answer to a set's creation, at ``location``: a new set's jobs get their ETAs once it has
    been sent (the forecast plays the whole queue forward); a replay says ``Idempotent-Replayed``."""
    if created:
        response.call_on_close(lambda: refresh_etas(services, set_id))
    response.headers["Location"] = location
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    return response


class AnySet(Protocol):
    """What the shared reads need of a set's row (a ``JobGroup``, a ``Batch``)."""

    id: uuid.UUID


@dataclass(frozen=True)
class SetRoutes:
    """How one kind of set is read over HTTP: where it lives (``path``, its id the one parameter,
    whose stem names the kind's codes: ``batch_not_found``, ``group_finished``), what the answers
    call it (``noun``) and the OpenAPI component of its view (``view``). ``declare_reads`` registers
    the routes both kinds answer alike, their summaries worded once for both."""

    api: RouteTable
    path: str
    noun: str  # "batch", "job group"
    view: str

    @property
    def missing(self) -> Schema:
        """The kind's 404, coded from its path's id name (``batch_not_found``, ``group_not_found``)."""
        return refused(f"No such {self.noun} ({self._stem}_not_found).")

    @property
    def _stem(self) -> str:
        return path_parameter(self.path).removesuffix("_id")

    def declare_reads(
        self,
        *,
        load: Callable[[str], Any],
        render: Callable[..., Response],
        cancel: Callable[..., Any],
        default_limit: int | None,
        every_job: Callable[[Session, uuid.UUID], list[Job]] | None = None,
        job_extra: Callable[[Job], dict[str, Any]] | None = None,
        shows: str = "",
    ) -> None:
        """``GET path`` (the set: the tenant-checked ``load`` of its id, then its ``render``),
        ``GET path/jobs`` (its jobs in row order, ``default_limit`` a page when no ``?limit=`` is
        given; None: ``every_job`` at once), ``POST path/cancel`` (``cancel(services, set id, *,
        actor)``, answered with the set's ``render``). ``job_extra``: what a job of this kind shows
        beyond its view (a batch's case and repeat); ``shows``: what its view adds, for the summary."""
        id_name, stem, noun, missing = path_parameter(self.path), self._stem, self.noun, self.missing

        def show_set(**ids: str) -> Response:
            """The set's view (its progress; a batch's verdicts once finished)."""
            return render(load(ids[id_name]))

        def set_jobs(**ids: str) -> Response:
            """The set's jobs (retries included), first row first, a page at a time (``next_cursor``)."""
            return jobs_page(load(ids[id_name]), default_limit, every_job, job_extra)

        def cancel_set(**ids: str) -> Response:
            """Cancel every unfinished job of the set (queued at once, running at its next step)."""
            loaded = load(ids[id_name])
            return render(cancel(services(), loaded.id, actor=current_principal().actor), 202)

        # Flask names an endpoint after its function: the names the web pages and tests know.
        show_set.__name__, set_jobs.__name__, cancel_set.__name__ = "show", "jobs", "cancel"
        one = (in_path(id_name),)
        self.api.route(
            "get",
            self.path,
            f"A {noun}: its status and progress (jobs by status){shows}",
            parameters=one,
            responses={"200": answer(f"The {noun}.", self.view), "404": missing},
        )(show_set)
        paging = "a page at a time"
        if default_limit is None:
            paging = "all at once, or with limit " + paging
        page: Schema = {
            "type": "object",
            "properties": {
                "jobs": {"type": "array", "items": ref("JobView")},
                "next_cursor": {"type": ["string", "null"]},
            },
        }
        self.api.route(
            "get",
            self.path + "/jobs",
            f"The {noun}'s jobs in row order, {paging} (next_cursor)",
            parameters=jobs_page_parameters(id_name, default_limit=default_limit),
            responses={
                "200": {
                    "description": "The jobs (a batch's with its case and repeat, a group's with its "
                    "group_row), and the next page's cursor (null on the last).",
                    "content": {"application/json": {"schema": page}},
                },
                "400": BAD_CURSOR,
                "404": missing,
                "422": refused("limit is not a whole number from 1 to 1000 (invalid_limit)."),
            },
        )(set_jobs)
        conflict = refused(f"Every job of the {noun} has ended already ({stem}_finished).")
        canceled = answer("Canceled (running jobs stop at their next step).", self.view)
        self.api.route(
            "post",
            self.path + "/cancel",
            f"Cancel the {noun}: every unfinished job (queued at once, running at its next step)",
            parameters=one,
            responses={"202": canceled, "404": missing, "409": conflict},
        )(cancel_set)


def jobs_page(
    loaded: AnySet,
    default_limit: int | None,
    every_job: Callable[[Session, uuid.UUID], list[Job]] | None,
    job_extra: Callable[[Job], dict[str, Any]] | None,
) -> Response:
    """One page of the set's jobs (positions and ETAs from the latest forecast)."""
    raw = request.args.get("limit")
    limit = parse_limit(raw, most=1000) if raw is not None else default_limit
    svc = services()
    forecast = latest_forecast(svc)
    with svc.db.session() as session:
        if limit is None:
            assert every_job is not None, "a set without a default page size lists every job"
            rows = every_job(session, loaded.id)
            page = JobList(jobs=job_views(session, rows, forecast=forecast))
        else:
            cursor = request.args.get("cursor") or None
            page, rows = group_jobs_page(session, loaded.id, limit=limit, cursor=cursor, forecast=forecast)
    views = [
        view.model_dump(mode="json") | (job_extra(job) if job_extra is not None else {})
        for job, view in zip(rows, page.jobs, strict=True)
    ]
    return jsonify({"object": page.object, "jobs": views, "next_cursor": page.next_cursor})
