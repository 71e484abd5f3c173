"""``jobservice fleet status`` and ``jobservice usage``: the fleet and the card-seconds used, read
from the API (``jobservice.client``) like ``submit`` and ``status``, so they work from anywhere with
a key (``JOBSERVICE_API_KEY``)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import click

from jobservice.cli.client import clear_errors, client_for
from jobservice.fleet.views import FleetView, UsageView

DEFAULT_URL = "http://127.0.0.1:8000"


@click.group("fleet")
def fleet_group() -> None:
    """The card groups: what each may serve, holds and runs, and where their time went."""


@fleet_group.command("status")
@click.option("--url", default=DEFAULT_URL, show_default=True, envvar="JOBSERVICE_URL")
@click.option(
    "--hours", type=click.FloatRange(0.1, 48), default=24.0, show_default=True, help="The ledger's window."
)
@click.option("--json", "as_json", is_flag=True, help="The API's answer as JSON.")
def status_command(url: str, hours: float, as_json: bool) -> None:
    """Each group's state, residency and ledger shares, and each model's queue and cost."""
    with clear_errors(url), client_for(url) as api:
        fleet = api.fleet(hours=hours)
    if as_json:
        click.echo(fleet.model_dump_json(indent=2))
        return
    click.echo(describe_fleet(fleet, hours=hours))


@fleet_group.command("forget")
@click.argument("group")
@click.option("--url", default=DEFAULT_URL, show_default=True, envvar="JOBSERVICE_URL")
def forget_command(group: str, url: str) -> None:
    """Retire card group GROUP now (its worker must be gone): it leaves /fleet and /metrics, its
    ledger and usage stay. A group down for JOBSERVICE_GROUP_RETENTION_HOURS retires by itself."""
    with clear_errors(url), client_for(url) as api:
        retired = api.forget_group(group)
    click.echo(f"card group {retired.id} retired at {retired.retired_at:%Y-%m-%d %H:%M:%S} UTC")


def _ago(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "-"
    seconds = max(0.0, (now - moment).total_seconds())
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def describe_fleet(fleet: FleetView, *, hours: float) -> str:
    """The fleet as a table people read."""
    now = fleet.at
    lines = [f"{'GROUP':<28} {'STATE':<11} {'FOR':>6} {'HOLDS':<34} {'MEMORY/CARD':<12} RUNS"]
    for g in fleet.groups:
        holds = ", ".join(r.model for r in g.resident) or "-"
        memory = (
            "-"
            if g.memory_gb_per_card is None
            else f"{g.memory_used_gb_per_card:g}/{g.memory_gb_per_card:g} GB"
        )
        state = g.state if g.online or g.state == "down" else f"{g.state}?"
        if g.draining_since is not None and g.online:
            state = f"{state}, draining"
        runs = g.state_model or "-"
        lines.append(f"{g.id:<28} {state:<11} {_ago(g.state_since, now):>6} {holds:<34} {memory:<12} {runs}")
        total = sum(g.ledger_seconds.values()) or 1.0
        shares = " ".join(f"{k} {v / total:.0%}" for k, v in g.ledger_seconds.items() if v)
        moves = f"{len(g.loads)} loads, {len(g.evictions)} evictions"
        lines.append(f"  last {hours:g} h: {shares or 'nothing yet'}; {moves}")
        if g.health:
            lines.append(f"  unhealthy: {'; '.join(g.health)}")
    lines.append("")
    lines.append(f"{'MODEL':<30} {'QUEUED':>6}  {'MAY RUN ON':<10} {'HELD BY':<30} COST")
    for m in fleet.models:
        cost = "; ".join(
            f"{kind}: {c.seconds_per_output_second if c.seconds_per_output_second is not None else '?'} s/s"
            f" + {c.seconds_per_job:g} s, load {c.load_s if c.load_s is not None else '?'} s"
            + ("" if c.samples else " (not measured)")
            for kind, c in m.cost.items()
        )
        held = ", ".join(m.resident_on) or ("(per run)" if m.per_run else "-")
        lines.append(f"{m.id:<30} {m.queued:>6}  {len(m.eligible_groups):>3} groups  {held:<30} {cost}")
    return "\n".join(lines)


@click.command("usage")
@click.option("--url", default=DEFAULT_URL, show_default=True, envvar="JOBSERVICE_URL")
@click.option(
    "--group-by", default="tenant,model", show_default=True, help="tenant, model, group, card_kind, outcome"
)
@click.option("--bucket", type=click.Choice(["hour", "day", "none"]), default="day", show_default=True)
@click.option("--from", "start", type=click.DateTime(), default=None, help="UTC (default: 24 h before --to).")
@click.option("--to", "end", type=click.DateTime(), default=None, help="UTC (default: now).")
@click.option("--tenant", default=None, help="Admins: one tenant only.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--csv", "as_csv", is_flag=True)
def usage_command(
    url: str,
    group_by: str,
    bucket: str,
    start: datetime | None,
    end: datetime | None,
    tenant: str | None,
    as_json: bool,
    as_csv: bool,
) -> None:
    """Card-seconds used, per hour or day and tenant, model ... (charged; the service's losses apart)."""
    query = {
        "group_by": tuple(k.strip() for k in group_by.split(",") if k.strip()),
        "bucket": bucket,
        "start": start.replace(tzinfo=UTC) if start else None,
        "end": end.replace(tzinfo=UTC) if end else None,
        "tenant": tenant,
    }
    with clear_errors(url), client_for(url) as api:
        if as_csv:
            sys.stdout.write(api.usage_csv(**query))
            return
        report = api.usage(**query)  # type: ignore[arg-type]
    if as_json:
        click.echo(report.model_dump_json(indent=2, by_alias=True))
        return
    click.echo(describe_usage(report))


def describe_usage(report: UsageView) -> str:
    """The usage report as a table."""
    keys = report.group_by
    head = ["BUCKET", *(k.upper() for k in keys), "JOBS", "CARD-S", "LOAD", "GENERATE", "FINISH", "WASTED"]
    rows = [head]
    for r in report.rows:
        when = r.bucket.strftime("%Y-%m-%d %H:%M") if r.bucket else "-"
        values = [str(getattr(r, k) or "-") for k in keys]
        figures = [r.card_seconds, r.load, r.generate, r.finish, r.wasted_card_seconds]
        rows.append([when, *values, str(r.jobs), *(f"{v:,.1f}" for v in figures)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    span = f"{report.start:%Y-%m-%d %H:%M} to {report.end:%Y-%m-%d %H:%M} UTC"
    lines.append(f"total {report.total_card_seconds:,.1f} card-seconds charged, {span}")
    return "\n".join(lines)
