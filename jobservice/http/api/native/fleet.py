"""``GET /fleet`` (what each card group holds and runs, and its ledger), ``DELETE /fleet/groups/<id>``
(retire a card group whose worker is gone) and ``GET /usage`` (card-seconds by tenant, model, hour or
day, as JSON or CSV)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

from flask import Blueprint, Response, request

from jobservice.db.tables import utcnow
from jobservice.errors import Forbidden, Malformed
from jobservice.fleet.card_groups import forget
from jobservice.fleet.presence import stale_after
from jobservice.fleet.status import fleet_status
from jobservice.fleet.usage import BUCKETS, GROUPINGS, usage_report
from jobservice.fleet.views import FleetView, RetiredCardGroupView, UsageRowView, UsageView
from jobservice.http.api.doc import RouteTable, answer, in_query, refused
from jobservice.http.api.native.jobs import services
from jobservice.http.api.policy.auth import current_principal

bp = Blueprint("fleet", __name__)
api = RouteTable(bp)

MAX_HOURS = 48.0  # the Fleet page's window at most
MAX_SPAN = timedelta(days=400)  # a usage report's period at most

FLEET_MODELS = (FleetView, RetiredCardGroupView, UsageView)


@api.route(
    "get",
    "/fleet",
    "Card groups: what each may serve, holds and runs, and its ledger over the last hours",
    parameters=(
        in_query(
            "hours",
            {"type": "number", "minimum": 0.1, "maximum": MAX_HOURS},
            description="The ledger's window (default 24).",
        ),
    ),
    responses={"200": answer("The fleet.", "FleetView"), "400": refused("A bad `hours`.")},
)
def get_fleet() -> Response:
    """Every card group and model now; job ids are shown to admins only."""
    hours = _number("hours", 24.0, low=0.1, high=MAX_HOURS)
    svc = services()
    with svc.db.session() as session:
        status = FleetView.model_validate(fleet_status(session, svc.catalog, svc.settings, hours=hours))
    if not current_principal().is_admin:
        for group in status.groups:
            group.job_id = group.next_job_id = None
            for span in group.timeline:
                span.job_id = None
            for event in [*group.loads, *group.evictions]:
                event.job_id = None
    return Response(status.model_dump_json() + "\n", mimetype="application/json")


@api.route(
    "delete",
    "/fleet/groups/{group_id}",
    "Retire a card group whose worker is gone: its ledger closed, gone from /fleet and /metrics, its "
    "history kept (a group down for JOBSERVICE_GROUP_RETENTION_HOURS retires by itself)",
    parameters=(
        {
            "name": "group_id",
            "in": "path",
            "required": True,
            "schema": {"type": "string"},
            "description": "The group's id, as /fleet shows it (e.g. npu:0,1,2,3@host).",
        },
    ),
    responses={
        "200": answer("Retired (now, or already before).", "RetiredCardGroupView"),
        "403": refused("The key is not an admin key (admin_only)."),
        "404": refused("No such card group (group_not_found)."),
        "409": refused("Its worker is online (group_online): stop the worker first."),
    },
)
def delete_group(group_id: str) -> Response:
    """Retire one card group at once (``jobservice fleet forget``)."""
    if not current_principal().is_admin:
        raise Forbidden("admin_only", "Only an admin key may retire a card group.")
    svc = services()
    retired_at = forget(svc.db, group_id, stale_after_seconds=stale_after(svc.settings))
    body = RetiredCardGroupView(id=group_id, retired_at=retired_at)
    return Response(body.model_dump_json() + "\n", mimetype="application/json")


@api.route(
    "get",
    "/usage",
    "Card-seconds used, by tenant and model per hour or day (JSON, or CSV with Accept: text/csv)",
    parameters=(
        in_query("group_by", description=f"Comma-separated: {', '.join(GROUPINGS)} (default tenant,model)."),
        in_query("bucket", {"type": "string", "enum": list(BUCKETS)}, description="Default day."),
        in_query("from", {"type": "string", "format": "date-time"}, description="Default: 24 h before `to`."),
        in_query("to", {"type": "string", "format": "date-time"}, description="Default: now."),
        in_query("tenant", description="Admins: one tenant only. Others see their own tenant only."),
    ),
    responses={
        "200": {
            "description": "Usage rows: charged card-seconds by phase; the service's own losses apart.",
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/UsageView"}},
                "text/csv": {"schema": {"type": "string"}},
            },
        },
        "400": refused("A bad `group_by`, `bucket`, `from` or `to` (invalid_parameters)."),
        "403": refused("Another tenant's usage (not_your_tenant)."),
    },
)
def get_usage() -> Response:
    """Card-seconds per bucket and key; a user sees its own tenant, an admin every tenant (or one)."""
    principal = current_principal()
    group_by = [k.strip() for k in (request.args.get("group_by") or "tenant,model").split(",") if k.strip()]
    unknown = [k for k in group_by if k not in GROUPINGS]
    if unknown or not group_by:
        raise Malformed(
            "invalid_parameters",
            f"group_by takes {', '.join(GROUPINGS)}; not {', '.join(unknown) or 'nothing'}.",
        )
    bucket = request.args.get("bucket") or "day"
    if bucket not in BUCKETS:
        raise Malformed("invalid_parameters", f"bucket is one of {', '.join(BUCKETS)}, not '{bucket}'.")
    end = _moment("to") or utcnow()
    start = _moment("from") or end - timedelta(hours=24)
    if start >= end or end - start > MAX_SPAN:
        raise Malformed(
            "invalid_parameters", f"`from` must come before `to`, at most {MAX_SPAN.days} days before."
        )
    tenant = request.args.get("tenant") or None
    if not principal.is_admin:
        if tenant not in (None, principal.tenant):
            raise Forbidden("not_your_tenant", "A key sees its own tenant's usage only.")
        tenant = principal.tenant
    svc = services()
    with svc.db.session() as session:
        rows = usage_report(session, group_by=group_by, bucket=bucket, since=start, until=end, tenant=tenant)
    views = [UsageRowView.model_validate({"bucket": r.bucket, **r.keys, **_figures(r)}) for r in rows]
    if "text/csv" in (request.headers.get("Accept") or ""):
        return _csv(group_by, views)
    body = UsageView.model_validate(
        {
            "group_by": group_by,
            "bucket": bucket,
            "from": start,
            "to": end,
            "tenant": tenant,
            "rows": views,
            "total_card_seconds": round(sum(v.card_seconds for v in views), 3),
        }
    )
    return Response(body.model_dump_json(by_alias=True) + "\n", mimetype="application/json")


def _figures(row: object) -> dict[str, object]:
    names = (
        "jobs",
        "attempts",
        "card_seconds",
        "load",
        "generate",
        "finish",
        "wasted_card_seconds",
        "failed",
        "canceled",
    )
    return {name: getattr(row, name) for name in names}


def _csv(group_by: list[str], views: list[UsageRowView]) -> Response:
    columns = ["bucket", *group_by, "jobs", "attempts", "card_seconds", "load", "generate", "finish"]
    columns += ["wasted_card_seconds", "failed", "canceled"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for view in views:
        data = view.model_dump(mode="json")
        writer.writerow(["" if data.get(c) is None else data[c] for c in columns])
    return Response(
        out.getvalue(), mimetype="text/csv", headers={"Content-Disposition": "inline; filename=usage.csv"}
    )


def _number(name: str, default: float, *, low: float, high: float) -> float:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise Malformed("invalid_parameters", f"`{name}` must be a number.") from None
    if not low <= value <= high:
        raise Malformed("invalid_parameters", f"`{name}` must be between {low:g} and {high:g}.")
    return value


def _moment(name: str) -> datetime | None:
    """An ISO 8601 time from the query (UTC when it names no zone); None when absent."""
    raw = request.args.get(name)
    if not raw:
        return None
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        raise Malformed(
            "invalid_parameters",
            f"`{name}` must be an ISO 8601 time such as 2026-12-03T00:00:00Z, not '{raw}'.",
        ) from None
