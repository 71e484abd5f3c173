"""The ``jobservice`` command."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import click

from jobservice.cli.batches import batch_group, beat_command
from jobservice.cli.check import check_command
from jobservice.cli.fleet import fleet_group, usage_command
from jobservice.cli.gc import gc_command
from jobservice.cli.groups import group_group
from jobservice.cli.keys import keys_group
from jobservice.cli.kit import kit_group
from jobservice.cli.tenants import tenants_group
from jobservice.cli.webhooks import webhooks_group
from jobservice.cli.workers import workers_command
from jobservice.logs import configure_logging
from jobservice.settings import Settings

DEFAULT_URL = "http://127.0.0.1:8000"


def _settings(var_dir: str | None = None) -> Settings:
    return Settings(var_dir=Path(var_dir)) if var_dir else Settings()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """jobservice: queue-backed audio2video and text2video jobs with validated outputs."""
    try:
        settings = Settings()
    except ValueError:  # a bad setting is reported by the command that needs it, not here
        return
    configure_logging(settings.log_level, settings.log_format)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option(
    "--devices", default="cpu", show_default=True, help="Cards of the one worker, e.g. cpu or cuda:0."
)
@click.option("--var-dir", default=None, help="Where SQLite, objects, Redis and logs live (default ./var).")
@click.option("--broker-url", default=None, help="Use this Redis instead of starting one.")
def up(host: str, port: int, devices: str, var_dir: str | None, broker_url: str | None) -> None:
    """Run the whole service on this machine until Ctrl-C (API keys off unless JOBSERVICE_AUTH=keys)."""
    from jobservice.cli.embedded import run_embedded

    settings = _settings(var_dir)
    if "auth" not in settings.model_fields_set:  # the single-user stack: no keys unless asked for
        settings = settings.model_copy(update={"auth": "off"})
    guard_auth(settings, host)
    sys.exit(run_embedded(settings, host=host, port=port, devices=devices, use_broker=broker_url))


LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def guard_auth(settings: Settings, host: str) -> None:
    """Say when API keys are off, and refuse that on an address others can reach unless the
    operator set JOBSERVICE_AUTH_OFF_ANYWHERE=1 (an authenticating proxy in front)."""
    if settings.auth != "off":
        return
    loopback = host in LOOPBACK or host.startswith("127.")
    if not loopback and not settings.auth_off_anywhere:
        raise click.ClickException(
            f"JOBSERVICE_AUTH=off on {host}, an address other machines can reach, would let anyone "
            "submit and read every job. Use JOBSERVICE_AUTH=keys (`jobservice keys create`), bind "
            "127.0.0.1, or set JOBSERVICE_AUTH_OFF_ANYWHERE=1 if something in front authenticates."
        )
    logging.getLogger("jobservice.cli").warning(
        "auth is off: anyone who can reach %s acts as admin (JOBSERVICE_AUTH=keys turns API keys on)", host
    )


@cli.command()
@click.option("--host", default=None, help="Default: JOBSERVICE_API_HOST (127.0.0.1).")
@click.option("--port", default=None, type=int, help="Default: JOBSERVICE_API_PORT (8000).")
@click.option("--workers", default=None, type=int)
@click.option("--threads", default=None, type=int)
def api(host: str | None, port: int | None, workers: int | None, threads: int | None) -> None:
    """Serve the HTTP API with gunicorn (gthread)."""
    from jobservice.cli.launch import serve_api

    settings = Settings()
    guard_auth(settings, host or settings.api_host)
    serve_api(
        settings,
        host=host or settings.api_host,
        port=port or settings.api_port,
        workers=workers or settings.api_workers,
        threads=threads or settings.api_threads,
    )


@cli.command()
@click.option(
    "--devices", default=None, help="cpu, cuda:0, cuda:0,1, npu:2,3 ... (default JOBSERVICE_WORKER_DEVICES)."
)
@click.option(
    "--models",
    default=None,
    help="Comma-separated model ids this card group may serve (default: its deployment group's, else all "
    "that fit); which of them it holds at a time follows the queue.",
)
@click.option(
    "--name",
    default=None,
    help="Card group name (default JOBSERVICE_WORKER_NODE, else <devices>@<host>); picks the deployment "
    "file's group of that name.",
)
@click.option(
    "--memory-gb",
    type=float,
    default=None,
    help="Memory of each card in GB, when neither the deployment file nor the cards say it (a CPU group "
    "then holds only the models that fit).",
)
@click.option(
    "--group",
    "group_key",
    default=None,
    help="The deployment file's card group this worker runs, by its name or its devices as the file "
    "writes them (npu:4-7), when the cards are numbered otherwise here: a container given its cards by "
    "a device plugin sees them from 0 (default: the group named --name, else the one on --devices).",
)
@click.option("--preload/--no-preload", default=False, help="Load models when the worker starts.")
@click.option("--loglevel", default="INFO", show_default=True)
def worker(
    devices: str | None,
    models: str | None,
    name: str | None,
    group_key: str | None,
    memory_gb: float | None,
    preload: bool,
    loglevel: str,
) -> None:
    """Run a Celery worker pinned to DEVICES: one card group of the fleet."""
    from jobservice.cli.launch import exec_worker
    from jobservice.fleet.placement import DeviceSpecError

    settings = Settings()
    if memory_gb is not None:
        if memory_gb <= 0:
            raise click.BadParameter("must be more than 0", param_hint="--memory-gb")
        os.environ["JOBSERVICE_WORKER_MEMORY_GB"] = str(memory_gb)  # the worker process reads its settings
    wanted = (
        [m.strip() for m in models.split(",") if m.strip()] if models else (settings.worker_models or None)
    )
    try:
        exec_worker(
            settings,
            devices=devices or settings.worker_devices,
            models=wanted,
            name=name,
            preload=preload,
            loglevel=loglevel,
            group_key=group_key,
        )
    except DeviceSpecError as exc:
        raise click.BadParameter(str(exc), param_hint="--devices") from None


@cli.command()
@click.option("--url", default=DEFAULT_URL, show_default=True, envvar="JOBSERVICE_URL")
@click.option("--task", type=click.Choice(["audio2video", "text2video"]), default=None)
@click.option("--model", default=None)
@click.option("--image", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None)
@click.option("--audio", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None)
@click.option("--prompt", default=None)
@click.option("-p", "--param", "params", multiple=True, help="Model parameter as key=value (repeatable).")
@click.option(
    "--retry-on-validation-failure",
    "retry",
    type=click.IntRange(0, 10),
    default=None,
    help="When the gate fails the video, run again with the next seed up to N times (default: the model's).",
)
@click.option(
    "--upload-above",
    "upload_above_mb",
    type=click.FloatRange(0),
    default=32.0,
    show_default=True,
    help="Send files larger than this many MB as direct uploads (POST /uploads: straight to S3, in parts, "
    "failed parts retried) instead of in the job's request; 0: every file.",
)
@click.option("--wait/--no-wait", default=True, show_default=True)
@click.option("--timeout", default=3600.0, show_default=True)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Save the video here.",
)
@click.option(
    "--manifest",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A CSV or JSON Lines file, one job per row: submit them all as one job group (-o saves the zip "
    "of its videos).",
)
@click.option("--name", default=None, help="The job group's name (with --manifest).")
@click.option(
    "--results",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="With --manifest --wait: save the group's results CSV here.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the final job (or group) as JSON.")
def submit(
    url: str,
    task: str | None,
    model: str | None,
    image: Path | None,
    audio: Path | None,
    prompt: str | None,
    params: tuple[str, ...],
    retry: int | None,
    upload_above_mb: float,
    wait: bool,
    timeout: float,
    output: Path | None,
    manifest: Path | None,
    name: str | None,
    results: Path | None,
    as_json: bool,
) -> None:
    """Submit a job (files in), or a job group (--manifest), wait with a progress bar, print the result."""
    from jobservice.cli import client

    if manifest is not None:
        from jobservice.cli.groups import submit_manifest

        single: dict[str, object] = {"--task": task, "--model": model, "--image": image, "--audio": audio}
        single |= {"--prompt": prompt, "--param": params or None, "--retry-on-validation-failure": retry}
        given = [flag for flag, value in single.items() if value is not None]
        if given:
            raise click.UsageError(f"{given[0]} does not go with --manifest: the manifest's columns say it.")
        submit_manifest(
            url,
            manifest,
            name=name,
            wait=wait,
            timeout=timeout,
            results=results,
            outputs=output,
            as_json=as_json,
        )
        return

    values: dict[str, Any] = {}
    for item in params:
        key, sep, raw = item.partition("=")
        if not sep:
            raise click.BadParameter(f"'{item}' is not key=value", param_hint="--param")
        values[key.strip()] = _coerce(raw)
    if prompt is not None:
        values["prompt"] = prompt
    if retry is not None:
        values["retry_on_validation_failure"] = retry
    if task is None:
        task = "audio2video" if (image or audio) else ("text2video" if prompt else None)
    job = client.submit(
        url,
        task=task,
        model=model,
        params=values,
        image=image,
        audio=audio,
        upload_above=int(upload_above_mb * 2**20),
    )
    click.echo(f"submitted job {job['id']} ({job['model']})", err=True)
    if wait:
        job = client.wait_for(url, job["id"], timeout=timeout)
    if output is not None and job.get("links", {}).get("video"):
        client.download(url, job, output)
        click.echo(f"saved video to {output}", err=True)
    click.echo(json.dumps(job, indent=2) if as_json else client.describe(job, url))
    if wait and job["status"] != "succeeded":
        sys.exit(1)


def _coerce(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


@cli.command()
@click.argument("job_id")
@click.option("--url", default=DEFAULT_URL, show_default=True, envvar="JOBSERVICE_URL")
@click.option("--json", "as_json", is_flag=True)
@click.option("--follow", is_flag=True, help="Follow the job live until it ends (exit 1 unless succeeded).")
@click.option("--timeout", default=3600.0, show_default=True, help="Seconds --follow waits.")
def status(job_id: str, url: str, as_json: bool, follow: bool, timeout: float) -> None:
    """Show one job (``--follow``: with a progress bar until it ends)."""
    from jobservice.cli import client

    job = client.wait_for(url, job_id, timeout=timeout) if follow else client.get_job(url, job_id)
    click.echo(json.dumps(job, indent=2) if as_json else client.describe(job, url))
    if follow and job["status"] != "succeeded":
        sys.exit(1)


@cli.command()
@click.argument("job_id")
@click.option("--url", default=DEFAULT_URL, show_default=True, envvar="JOBSERVICE_URL")
def delete(job_id: str, url: str) -> None:
    """Delete one job: a queued one is canceled, its files are deleted, and it is gone from lists and
    reads. A running job is asked to stop; run this again once it has ended."""
    from jobservice.cli import client

    deleted = client.delete_job(url, job_id)
    click.echo(f"deleted {deleted['id']} at {deleted['deleted_at']}")


@cli.group()
def db() -> None:
    """Database administration."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
def db_upgrade(revision: str) -> None:
    """Apply migrations to JOBSERVICE_DATABASE_URL (default SQLite under var/)."""
    from jobservice.db.migrate import upgrade

    settings = Settings()
    url = settings.resolved_database_url()
    upgrade(url, revision)
    click.echo(f"database at {url.split('@')[-1]} is at {revision}")
    if revision == "head":  # batches made before 0.2.0: their files into their job group's home
        from jobservice.db.engine import Database
        from jobservice.groups.relocate import move_legacy_batch_files
        from jobservice.storage import make_store

        database = Database(url)
        try:
            moved = move_legacy_batch_files(database, make_store(settings))
        finally:
            database.dispose()
        if moved:
            click.echo(f"moved the files of {moved} batches under groups/<id>/")


@cli.command()
@click.option("--json", "as_json", is_flag=True)
def devices(as_json: bool) -> None:
    """The cards this host sees (with free memory) and the workers that own them."""
    from jobservice.fleet.placement import inventory

    found = inventory()
    workers: list[dict[str, Any]] = []
    try:
        from jobservice.db.engine import Database
        from jobservice.fleet.presence import online_workers, stale_after, worker_view

        settings = Settings()
        with Database(settings.resolved_database_url()).session() as session:
            online = online_workers(session, stale_after_seconds=stale_after(settings))
            workers = [worker_view(w) for w in online]
    except Exception as exc:  # noqa: BLE001 - the local view is still useful
        found["workers_error"] = str(exc).splitlines()[0]
    found["workers"] = workers
    if as_json:
        click.echo(json.dumps(found, indent=2, default=str))
        return
    click.echo(f"host {found['hostname']}: {found['cpu_count']} CPU cores")
    if not found["cards"]:
        click.echo("  no GPU or NPU cards found (nvidia-smi / npu-smi)")
    for card in found["cards"]:
        free = f", {card['free_mb']:.0f} of {card['total_mb']:.0f} MB free" if "free_mb" in card else ""
        click.echo(f"  {card['kind']}:{card['index']} {card['name']}{free}")
    for w in workers:
        click.echo(f"  worker {w['id']} owns {w['devices']} serving {', '.join(w['models'])}")


@cli.command()
@click.option("--once", is_flag=True, help="One pass, then exit.")
def reap(once: bool) -> None:
    """The workers' upkeep round: groups whose workers died go down, jobs of dead runs are requeued,
    lost messages recovered, free groups given their next jobs."""
    import time

    from jobservice.jobs.upkeep import Upkeep
    from jobservice.wiring import build_services

    upkeep = Upkeep(build_services(Settings()))
    while True:
        result = upkeep.run_once()
        click.echo(json.dumps(result.__dict__))
        if once:
            return
        time.sleep(upkeep.services.settings.reap_interval_seconds)


cli.add_command(batch_group)
cli.add_command(group_group)
cli.add_command(beat_command)
cli.add_command(workers_command)
cli.add_command(tenants_group)
cli.add_command(fleet_group)
cli.add_command(usage_command)
cli.add_command(gc_command)
cli.add_command(check_command)
cli.add_command(keys_group)
cli.add_command(kit_group)
cli.add_command(webhooks_group)


def main() -> None:
    """Console-script entry point."""
    cli()


if __name__ == "__main__":
    main()
