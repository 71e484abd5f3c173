"""Job-group pages of the web UI: ``/ui/groups`` (a new group from a dropped manifest, and the list)
and ``/ui/groups/<id>`` (its progress, live; its results and videos; cancel).

The form posts the manifest file to ``POST /ui/groups``, which runs exactly what ``POST
/job-groups`` runs (every row checked, then all jobs in one transaction) and answers 303 to the
group's page, or the page again with each problem of the manifest in a table (row, column, what is
wrong). A folder of files dropped beside the manifest is for its input cells that name files by
name: the page's script (``static/groups.js``) uploads each such file (``POST /uploads``) and
rewrites its cells to ``upload:<id>`` before posting (the job form's uploader: declare, PUT the
parts, complete); files posted here with the form, without the script, are refused with a sentence
that says what works instead.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, flash, jsonify, redirect, render_template, request, url_for
from werkzeug.wrappers import Response as WerkzeugResponse

from jobservice.errors import DomainError, Invalid
from jobservice.groups.manifest import read_manifest
from jobservice.groups.plan import check_rows
from jobservice.groups.presenters import group_jobs_page, group_view, list_groups
from jobservice.groups.service import admit_group, cancel_group, create_group, refresh_etas
from jobservice.groups.views import ENDED_GROUP_STATUSES, GroupProblem
from jobservice.http.api.errors import OUTAGES, refusal_of
from jobservice.http.api.native.groups import group_name_of_request, load_group, manifest_of_request
from jobservice.http.api.native.jobs import services
from jobservice.http.api.policy.auth import current_principal
from jobservice.http.web.blueprint import register_page_handlers, wants_json
from jobservice.http.web.forms import form_within_limits
from jobservice.http.web.security import check_csrf

bp = Blueprint("groups_web", __name__)
register_page_handlers(bp)

REFRESH_SECONDS = 5
SHOWN_ROWS = 200  # rows listed on a group's page; the results CSV has them all
FOLDER_FIELD = "files"


def _list_page(
    *, problems: list[GroupProblem] | None = None, error: str | None = None, status: int = 200
) -> Any:
    with services().db.session() as session:
        page = list_groups(session, tenant=current_principal().scope(), limit=50)
    running = any(g.status not in ENDED_GROUP_STATUSES for g in page.groups)
    html = render_template(
        "groups/list.html",
        groups=page.groups,
        problems=problems or [],
        error=error,
        refresh=REFRESH_SECONDS if running and not (problems or error) else None,
        max_mb=services().settings.group_manifest_max_mb,
        nav="groups",
    )
    return html, status


@bp.get("/ui/groups")
def groups() -> Any:
    """The new-group form and the caller's groups, newest first."""
    return _list_page()


def _refused(exc: DomainError) -> Any:
    problems = [GroupProblem.of(d) for d in exc.details if isinstance(d, dict) and d.get("row")]
    if wants_json():
        return jsonify(exc.body()), exc.status
    return _list_page(problems=problems, error=exc.message, status=exc.status)


@bp.post("/ui/groups")
def create() -> Any:
    """Accept a dropped manifest: 303 to the new group's page, or the form again with its problems."""
    if not form_within_limits():
        return _refused(Invalid("payload_too_large", "The upload is larger than this server accepts."))
    check_csrf()
    svc = services()
    principal = current_principal()
    try:
        if any(part.filename for part in request.files.getlist(FOLDER_FIELD)):
            raise Invalid(
                "folder_needs_script",
                "A folder's files are sent by the page's script as direct uploads, and it did not run: "
                "turn JavaScript on, or upload the files first (POST /uploads) and name them "
                "upload:<id> in the manifest (or stored files as key:<object key>), then drop the "
                "manifest alone.",
            )
        data, fmt, filename = manifest_of_request()
        name = group_name_of_request(filename)
        settings = svc.settings
        manifest = read_manifest(
            data, fmt, max_bytes=settings.group_manifest_max_mb * 2**20, max_rows=settings.group_max_rows
        )
        admit_group(svc, principal=principal, rows=len(manifest.rows) + len(manifest.problems))
        with check_rows(svc, manifest, principal=principal) as plan:
            group, _ = create_group(svc, plan, principal=principal, source="web", name=name)
    except (DomainError, *OUTAGES) as exc:
        return _refused(refusal_of(exc))
    page = url_for("groups_web.group_page", group_id=str(group.id))
    response: WerkzeugResponse
    if wants_json():
        response = jsonify({"id": str(group.id), "url": page})
        response.status_code = 202
        response.headers["Location"] = page
    else:
        response = redirect(page, code=303)
    response.call_on_close(lambda: refresh_etas(svc, group.id))
    return response


@bp.get("/ui/groups/<group_id>")
def group_page(group_id: str) -> str:
    """One group: its progress (live while it runs), its first rows, its results and videos."""
    group = load_group(group_id)
    with services().db.session() as session:
        view = group_view(session, group)
        page, rows = group_jobs_page(session, group.id, limit=SHOWN_ROWS)
    ended = view.status in ENDED_GROUP_STATUSES
    return render_template(
        "groups/group.html",
        group=view,
        jobs=list(zip(rows, page.jobs, strict=True)),
        more=page.next_cursor is not None,
        ended=ended,
        refresh=None if ended else REFRESH_SECONDS,
        nav="groups",
    )


@bp.post("/ui/groups/<group_id>/cancel")
def cancel(group_id: str) -> Response:
    """Cancel every unfinished job of the group."""
    check_csrf()
    group = load_group(group_id)
    cancel_group(services(), group.id, actor=current_principal().actor)
    flash("Canceled: queued jobs at once, running ones at their next step.", "success")
    return redirect(url_for("groups_web.group_page", group_id=str(group.id)), code=303)  # type: ignore[return-value]
