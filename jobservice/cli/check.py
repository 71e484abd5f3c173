"""``jobservice check``: the jobs table against the object store, and the leases (see
``jobservice.retention.consistency``). Read-only unless ``--repair``, which prints its plan first."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import click

from jobservice.cli.errors import unavailable_database
from jobservice.settings import Settings

EXIT_FOUND = 1  # something is inconsistent (after --repair: something is still left)


@click.command("check")
@click.option("--repair", is_flag=True, help="Settle what was found (the plan is printed first).")
@click.option("--yes", is_flag=True, help="With --repair: do not ask before carrying out the plan.")
@click.option(
    "--deep", is_flag=True, help="Also read every succeeded job's video and compare it with its RunReport."
)
@click.option(
    "--min-age",
    default=600.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds: a row-less prefix written more recently may be a submission in flight; never repaired.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the findings as one JSON object.")
def check_command(repair: bool, yes: bool, deep: bool, min_age: float, as_json: bool) -> None:
    """Find orphan objects, jobs whose files are missing, corrupt videos (--deep) and dead leases.
    Exit 0 when consistent, 1 when something was found (or is left after --repair)."""
    from jobservice.retention.consistency import check
    from jobservice.wiring import build_services

    services = build_services(Settings())
    try:
        with unavailable_database():
            found = check(services, deep=deep, min_age=timedelta(seconds=min_age))
            if repair:
                found = _repair(services, found, yes=yes, deep=deep, min_age=min_age, as_json=as_json)
    finally:
        services.db.dispose()
    shown = found.as_dict()
    click.echo(json.dumps(shown, indent=2) if as_json else describe(shown))
    if not found.consistent:
        raise SystemExit(EXIT_FOUND)


def _repair(services: Any, found: Any, *, yes: bool, deep: bool, min_age: float, as_json: bool) -> Any:
    """Print the plan, ask (unless ``yes``), carry it out and check again."""
    from jobservice.retention.consistency import check
    from jobservice.retention.consistency import repair as settle

    plan = found.plan()
    click.echo("plan:" if plan else "plan: nothing to repair", err=as_json)
    for line in plan:
        click.echo(f"  {line}", err=as_json)
    if not plan:
        return found
    if not yes and not click.confirm("carry it out?", err=True):
        raise click.Abort()
    done = settle(services, found).repaired
    found = check(services, deep=deep, min_age=timedelta(seconds=min_age))
    found.repaired = done
    return found


def describe(found: dict[str, Any]) -> str:
    """Human lines: each kind of finding with its items, then what a repair did."""
    lines = []
    young = [o for o in found["orphans"] if o["young"]]
    lines.append(f"orphans: {len(found['orphans'])} store prefixes without a row ({len(young)} young)")
    for o in found["orphans"]:
        mark = "  (young: may be a submission in flight)" if o["young"] else ""
        lines.append(
            f"  {o['prefix']}  {o['objects']} objects, {o['bytes']:,} bytes, newest {o['newest']}{mark}"
        )
    lines.append(f"missing: {len(found['missing'])} jobs whose files are not in the store")
    lines += [f"  job {m['job']} ({m['status']}): {', '.join(m['keys'])}" for m in found["missing"]]
    if found["deep"]:
        lines.append(f"corrupt: {len(found['corrupt'])} videos that differ from their RunReport")
        lines += [f"  job {c['job']}: {c['key']}: {c['why']}" for c in found["corrupt"]]
    lines.append(f"leases: {len(found['expired_leases'])} running jobs whose lease ran out")
    lines += [
        f"  job {e['job']} held by {e['worker']} until {e['lease_expires_at']}"
        for e in found["expired_leases"]
    ]
    if found["unknown_holders"]:
        lines.append(
            f"  {len(found['unknown_holders'])} running jobs' workers are not online but still heartbeat"
        )
    for what, items in (found.get("repaired") or {}).items():
        if items:
            lines.append(f"repaired: {what} {len(items)}: {', '.join(items[:10])}")
    lines.append("consistent" if found["consistent"] else "NOT consistent")
    return "\n".join(lines)
