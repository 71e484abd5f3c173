"""``jobservice kit``: the Kubernetes kit's worker workloads, generated from the deployment file."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from jobservice.cli.workers import deployment_file_option


@click.group("kit")
def kit_group() -> None:
    """The Kubernetes kit (deploy/kubernetes): workers generated from the deployment file."""


@kit_group.command("generate")
@click.argument(
    "overlays", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path)
)
@click.option(
    "--check", is_flag=True, help="Write nothing; exit 1 if a generated file is missing or differs."
)
def generate_command(overlays: tuple[Path, ...], check: bool) -> None:
    """Write each OVERLAY's workers.yaml (one StatefulSet per card group of the deployment file its
    kit.yaml names, the file as a ConfigMap, their headless Service) and, when kit.yaml asks for
    autoscaling, its autoscaling/ component (a KEDA ScaledObject per StatefulSet)."""
    from jobservice.kit.files import stale, write
    from jobservice.kit.values import KitError

    problems = 0
    for overlay in overlays:
        try:
            paths = stale(overlay) if check else write(overlay)
        except KitError as exc:
            raise click.ClickException(str(exc)) from None
        for path in paths:
            verb = "out of date" if check else "wrote"
            click.echo(f"{verb}: {os.path.relpath(path)}", err=check)
        problems += len(paths) if check else 0
    if problems:
        click.echo("run `jobservice kit generate` on these overlays and commit the result", err=True)
        sys.exit(1)


@kit_group.command("compose-check")
@click.argument("compose_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@deployment_file_option
def compose_check_command(compose_file: Path, deployment_file: Path | None) -> None:
    """Exit 1 unless COMPOSE_FILE runs one worker service per card group of the deployment file, each
    with a stable group id and a stop grace that covers its longest job."""
    import yaml

    from jobservice.families.deployment import DeploymentError, build_catalog
    from jobservice.kit.compose import compose_problems
    from jobservice.settings import Settings

    settings = Settings(deployment_file=deployment_file) if deployment_file else Settings()
    if settings.deployment_file is None:
        raise click.UsageError("no deployment file: pass --file or set JOBSERVICE_DEPLOYMENT_FILE")
    try:
        catalog = build_catalog(deployment_file=settings.deployment_file)
    except DeploymentError as exc:
        raise click.ClickException(str(exc)) from None
    compose = yaml.safe_load(compose_file.read_text(encoding="utf-8")) or {}
    problems = compose_problems(compose, catalog, job_timeout_seconds=settings.job_timeout_seconds)
    for problem in problems:
        click.echo(problem, err=True)
    if problems:
        sys.exit(1)
    click.echo(f"{compose_file}: one worker per card group of {settings.deployment_file}")
