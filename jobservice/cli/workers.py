"""``jobservice workers``: the card groups of the deployment file, what each can serve on this host,
and the command that starts each (or, with ``--launch``, all of them at once)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from jobservice.settings import Settings


def _plan(settings: Settings) -> list[dict[str, Any]]:
    from jobservice.families.deployment import build_catalog
    from jobservice.fleet.placement import parse_devices, servable_models
    from jobservice.fleet.stopping import stop_grace_seconds

    catalog = build_catalog(settings.catalog_extra, deployment_file=settings.deployment_file)
    plan = []
    for group in catalog.groups:
        device = parse_devices(group.devices)
        reasons = servable_models(catalog, device, list(group.models))
        grace = stop_grace_seconds(catalog, group.models, job_timeout_seconds=settings.job_timeout_seconds)
        argv = ["jobservice", "worker", "--devices", group.devices, "--models", ",".join(group.models)]
        if group.name:
            argv += ["--name", group.name]
        entry = {
            "devices": group.devices,
            "models": list(group.models),
            "reasons": reasons,
            "argv": argv,
            "grace": grace,
        }
        plan.append(entry)
    return plan


# ``--file``: the deployment file a command reads (``jobservice workers``, ``jobservice kit compose-check``).
deployment_file_option = click.option(
    "--file",
    "deployment_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Deployment file (default JOBSERVICE_DEPLOYMENT_FILE).",
)


@click.command("workers")
@deployment_file_option
@click.option("--launch", is_flag=True, help="Start one worker per card group and wait for them.")
@click.option("--check", is_flag=True, help="Exit 1 unless every group can serve all its models here.")
def workers_command(deployment_file: Path | None, launch: bool, check: bool) -> None:
    """The deployment file's card groups: what each serves here, and how to start it."""
    from jobservice.families.deployment import DeploymentError

    settings = Settings(deployment_file=deployment_file) if deployment_file else Settings()
    if settings.deployment_file is None:
        raise click.UsageError("no deployment file: pass --file or set JOBSERVICE_DEPLOYMENT_FILE")
    try:
        plan = _plan(settings)
    except DeploymentError as exc:
        raise click.ClickException(str(exc)) from None
    if not plan:
        click.echo(f"{settings.deployment_file}: no workers: groups")
    problems = 0
    for group in plan:
        click.echo(f"{group['devices']}: {' '.join(group['argv'])}")
        click.echo(f"  stop grace {group['grace']} s (its longest job and its ending: give its unit this)")
        for model, reason in group["reasons"].items():
            problems += reason is not None
            click.echo(f"  {model}: {'ok' if reason is None else 'NOT SERVABLE HERE: ' + reason}")
    if check and problems:
        sys.exit(1)
    if launch:
        sys.exit(_launch(plan, settings.deployment_file))


def _launch(plan: list[dict[str, Any]], deployment_file: Path) -> int:
    """Run every group's worker as a child; Ctrl-C or SIGTERM stops them all."""
    env = dict(os.environ, JOBSERVICE_DEPLOYMENT_FILE=str(Path(deployment_file).resolve()))
    env.pop("JOBSERVICE_WORKER_NODE", None)  # one id per group: each child names its own
    children = [
        subprocess.Popen([sys.executable, "-m", "jobservice.cli.main", *group["argv"][1:]], env=env)
        for group in plan
    ]
    stopping = {"signal": 0}

    def stop(signum: int, _frame: Any) -> None:
        stopping["signal"] = signum
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    status = 0
    while any(child.poll() is None for child in children):
        time.sleep(0.5)
    for group, child in zip(plan, children, strict=True):
        if child.returncode and not stopping["signal"]:
            click.echo(f"worker {group['devices']} exited with status {child.returncode}", err=True)
            status = status or child.returncode
    return status
