"""``jobservice gc``: one sweep of everything at once (retention, orphans, logs under var/)."""

from __future__ import annotations

import json
from typing import Any

import click

from jobservice.cli.errors import unavailable_database
from jobservice.settings import Settings


@click.command("gc")
@click.option("--dry-run", is_flag=True, help="Show what would be deleted; delete nothing.")
@click.option("--limit", default=500, show_default=True, type=click.IntRange(min=1), help="Jobs per pass.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
def gc_command(dry_run: bool, limit: int, as_json: bool) -> None:
    """Delete expired jobs' files (rows kept, marked expired), orphans, and rotate var/ logs."""
    from jobservice.retention import collect
    from jobservice.wiring import build_services

    settings = Settings()
    services = build_services(settings)
    try:
        with unavailable_database():
            report = collect(services, dry_run=dry_run, limit=limit, logs_folder=settings.var_dir)
    finally:
        services.db.dispose()
    shown = report.as_dict()
    if as_json:
        click.echo(json.dumps(shown, indent=2))
        return
    click.echo(describe(shown))


def describe(report: dict[str, Any]) -> str:
    """A few human lines: what was (or would be) deleted."""
    verb = "would delete" if report["dry_run"] else "deleted"
    kept = report["retention"]
    lines = [
        f"retention: {verb} the files of {len(kept['expired'])} expired jobs "
        f"({kept['objects_deleted']} objects), shared inputs of {len(kept['batch_inputs'])} batches"
        f" and {len(kept.get('group_inputs') or [])} job groups"
    ]
    lines += [f"  job {job_id}" for job_id in kept["expired"]]
    lines += [f"  batch {batch_id} inputs" for batch_id in kept["batch_inputs"]]
    lines += [f"  job group {group_id} inputs" for group_id in kept.get("group_inputs") or []]
    orphans = report.get("orphans")
    if orphans:
        for label, name in (
            ("spool files", "spool"),
            ("scratch folders", "scratch"),
            ("store temp files", "store_temp"),
            ("store prefixes without a row", "prefixes"),
        ):
            lines.append(f"orphans: {verb} {len(orphans[name])} {label}")
            lines += [f"  {item}" for item in orphans[name]]
    if report.get("rotated_logs"):
        lines.append("rotated logs: " + ", ".join(report["rotated_logs"]))
    failed = kept["failed"] + (orphans["failed"] if orphans else [])
    if failed:
        lines.append(f"failed (retried next time): {', '.join(failed)}")
    return "\n".join(lines)
