"""``jobservice tenants``: set and show a tenant's quota and retention overrides, and its fair-share
weight (``--weight``: a tenant of weight 3 gets three times the card-seconds of a tenant of weight 1
while both have jobs waiting; default 1). ``FAIR_SHARE_RULE`` says the rule in a sentence; every
listing prints it.

A tenant needs no row to exist (its jobs and keys name it); a row only overrides the settings'
defaults (``JOBSERVICE_QUOTA_*``, ``JOBSERVICE_RETENTION_HOURS``), and a key's own overrides win
over the tenant's. 0 allows no jobs of that kind, except ``--requests-per-minute 0``: no rate limit.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click
from sqlalchemy import select

from jobservice.auth.keys import check_limits
from jobservice.auth.principal import check_tenant
from jobservice.cli.errors import refusals
from jobservice.db.engine import Database
from jobservice.db.tables import Tenant, utcnow
from jobservice.quotas.limits import resolve_limits
from jobservice.quotas.usage import tenant_usage
from jobservice.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])


# The limits a tenant or a key may override, with what each counts: `tenants set` and `keys create`.
LIMIT_OPTIONS: tuple[tuple[str, click.ParamType, str], ...] = (
    ("--active-jobs", click.IntRange(min=0), "Interactive jobs queued+running (0: none)."),
    ("--batch-jobs", click.IntRange(min=0), "Jobs in one batch (0: no batches)."),
    ("--group-jobs", click.IntRange(min=0), "Jobs in one job group (0: no groups)."),
    ("--jobs-per-hour", click.IntRange(min=0), "Jobs created per rolling hour."),
    ("--requests-per-minute", click.IntRange(min=0), "Per key (0: no rate limit)."),
    ("--retention-hours", click.FloatRange(min=0, min_open=True), "Keep files this long."),
    ("--pending-uploads", click.IntRange(min=0), "Direct uploads declared, not completed (0: none)."),
    ("--pending-upload-mb", click.IntRange(min=0), "Declared MiB of those, all together."),
)


def limit_options(prefix: str = "") -> Callable[[F], F]:
    """The ``LIMIT_OPTIONS`` on a command, each help after ``prefix``; unset ones arrive as None."""

    def apply(command: F) -> F:
        for flag, kind, text in reversed(LIMIT_OPTIONS):
            shown = prefix + text[0].lower() + text[1:] if prefix else text
            command = click.option(flag, type=kind, help=shown)(command)
        return command

    return apply


FAIR_SHARE_RULE = (
    "fair share: among jobs of the same priority that a free card group can run as well, the tenant "
    "with the fewest card-seconds for its weight goes first (charged when a job is dispatched, halved "
    "every fair-share half-life); a tenant that starts queueing comes in at the level of those already "
    "waiting, less a newcomer credit (by default a minute of every online card), so idle time banks "
    "nothing more"
)


@click.group("tenants")
def tenants_group() -> None:
    """Per-tenant quota and retention overrides, and fair-share weights."""


@tenants_group.command("set")
@click.argument("name")
@limit_options()
@click.option(
    "--weight",
    type=click.FloatRange(min=0.01, max=1000),
    help="Fair share: its card-seconds count divided by this while others wait (default 1).",
)
@click.option("--clear", is_flag=True, help="Drop the existing overrides first (back to the defaults).")
@click.option("--json", "as_json", is_flag=True)
def set_command(name: str, clear: bool, as_json: bool, weight: float | None, **values: Any) -> None:
    """Create or update tenant NAME's overrides (options not given are kept, unless --clear)."""
    settings = Settings()
    with refusals():
        tenant = check_tenant(name)
        given = check_limits({k: v for k, v in values.items() if v is not None})
        with Database(settings.resolved_database_url()).session() as session:
            row = session.get(Tenant, tenant)
            if row is None:
                row = Tenant(name=tenant, limits={}, created_at=utcnow(), updated_at=utcnow())
                session.add(row)
            row.limits = {**({} if clear else dict(row.limits or {})), **given}
            if weight is not None:
                row.weight = weight
            elif clear:
                row.weight = 1.0
            row.updated_at = utcnow()
            shown = _describe(session, settings, tenant, row.limits, row.weight)
    _echo([shown], as_json, single=True)


@tenants_group.command("show")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True)
def show_command(name: str | None, as_json: bool) -> None:
    """Tenant NAME's limits (overrides marked) and usage; without NAME, every tenant with overrides."""
    settings = Settings()
    with refusals(), Database(settings.resolved_database_url()).session() as session:
        if name is not None:
            row = session.get(Tenant, check_tenant(name))
            _echo(
                [
                    _describe(
                        session,
                        settings,
                        name,
                        dict(row.limits or {}) if row else {},
                        row.weight if row else 1.0,
                    )
                ],
                as_json,
                single=True,
            )
            return
        rows = session.scalars(select(Tenant).order_by(Tenant.name))
        shown = [_describe(session, settings, r.name, dict(r.limits or {}), r.weight) for r in rows]
    if not shown and not as_json:
        click.echo("no tenant has overrides; every tenant has the defaults")
        return
    _echo(shown, as_json, single=False)


def _describe(
    session: Any, settings: Settings, tenant: str, overrides: dict[str, Any], weight: float | None
) -> dict[str, Any]:
    limits = resolve_limits(settings, tenant=overrides).as_dict()
    return {
        "tenant": tenant,
        "weight": weight if weight is not None else 1.0,
        "overrides": overrides,
        "limits": limits,
        "usage": tenant_usage(session, tenant).as_dict(),
    }


def _echo(shown: list[dict[str, Any]], as_json: bool, *, single: bool) -> None:
    if as_json:
        click.echo(json.dumps(shown[0] if single else shown, indent=2))
        return
    click.echo(FAIR_SHARE_RULE)
    for entry in shown:
        click.echo(f"tenant {entry['tenant']}  (fair-share weight {entry['weight']:g})")
        for limit, value in entry["limits"].items():
            mark = "  (override)" if limit in entry["overrides"] else ""
            click.echo(f"  {limit:<20} {value}{mark}")
        usage = entry["usage"]
        click.echo(
            f"  usage: {usage['active_jobs']} active jobs, {usage['active_batch_jobs']} active batch and "
            f"group jobs, {usage['jobs_last_hour']} created in the last hour, "
            f"{usage['pending_uploads']} pending uploads ({usage['pending_upload_mb']:g} MiB)"
        )
