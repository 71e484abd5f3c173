"""``jobservice batch ...``: run a spec, follow it with a progress bar, report, compare, pin.

These commands work on the service's database, object store and broker directly (like
``jobservice reap``), configured by the same ``JOBSERVICE_*`` settings as the service, so local
input paths are read on this machine. Next to a running ``jobservice up`` they find its Redis
under ``var/redis`` by themselves.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from jobservice.cli.client import draw_progress
from jobservice.cli.errors import refusals
from jobservice.errors import Conflict
from jobservice.nightly.compare import EXIT_INCONCLUSIVE
from jobservice.nightly.states import BatchStatus
from jobservice.settings import Settings
from jobservice.storage import StoreUnavailable
from jobservice.wiring import Services, build_services

F = TypeVar("F", bound=Callable[..., Any])
GOOD = ("passed", "no_baseline")
EXIT_USAGE = 2  # a bad spec or command line (click's own usage errors exit 2 too)


def cli_services() -> Services:
    """Services from the environment; uses the embedded stack's Redis when no broker is configured."""
    settings = Settings()
    sock = settings.var_dir / "redis" / "redis.sock"
    if "broker_url" not in settings.model_fields_set and sock.exists():
        settings = settings.model_copy(update={"broker_url": f"redis+socket://{sock.resolve()}"})
    return build_services(settings)


class SpecRefused(click.ClickException):
    """A spec that cannot be run: a usage error (exit 2), never mistaken for a regression (exit 1)."""

    exit_code = EXIT_USAGE


def watch_options(command: F) -> F:
    """``--wait`` (follow with a progress line until the batch ends), ``--timeout`` and ``--json``:
    what every command that ends by showing a batch takes (``_finish``)."""
    options = (
        click.option("--wait/--no-wait", default=False, help="Follow the batch until it ends."),
        click.option("--timeout", default=6 * 3600.0, show_default=True, help="Seconds --wait waits."),
        click.option("--json", "as_json", is_flag=True, help="Print the final summary as JSON."),
    )
    for option in reversed(options):
        command = option(command)
    return command


@contextmanager
def clear_errors() -> Iterator[None]:
    """Turn service refusals into one-line CLI errors (exit 1; a bad spec exit 2) instead of tracebacks."""
    from jobservice.nightly.spec import SpecError

    try:
        with refusals():
            yield
    except SpecError as exc:
        lines = [exc.message] + [f"  {d['field']}: {d['message']}" for d in exc.details[1:]]
        raise SpecRefused("\n".join(lines)) from None
    except StoreUnavailable as exc:
        raise click.ClickException(f"storage_unavailable: The object store is unavailable: {exc}") from None


@click.group("batch")
def batch_group() -> None:
    """Nightly regression batches: run a spec, compare with a baseline, report."""


@batch_group.command("run")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@watch_options
def run(spec: Path, wait: bool, timeout: float, as_json: bool) -> None:
    """Create a batch from the SPEC file and queue its jobs (below interactive jobs).

    With --wait, the exit status is the batch's verdict: 0 passed (or no baseline yet), 1 regressed,
    failed or not finished, 3 inconclusive; 2 a spec that cannot be run.
    """
    from jobservice.groups.service import refresh_etas
    from jobservice.nightly.plan import plan_batch
    from jobservice.nightly.service import create_batch
    from jobservice.nightly.spec import load_spec_file

    services = cli_services()
    with clear_errors():
        loaded = load_spec_file(spec)
        with plan_batch(services, loaded) as plan:
            _warn_unserved(services, {case.model for case in plan.cases})
            try:
                batch, _ = create_batch(
                    services,
                    plan,
                    source="cli",
                    on_recorded=lambda b: click.echo(
                        f"batch {b.id} ({b.name}): queueing {b.total_jobs} jobs",
                        err=True,
                    ),
                )
            except KeyboardInterrupt:
                click.echo(
                    "\ninterrupted: a batch exists only with all its jobs (`jobservice batch list`)", err=True
                )
                sys.exit(130)
    refresh_etas(services, batch.id)
    _finish(services, batch.id, wait=wait, timeout=timeout, as_json=as_json)


def _warn_unserved(services: Services, models: set[str]) -> None:
    """Say so when no worker serves a model of the spec: its jobs would wait until one starts."""
    from jobservice.fleet.presence import online_workers

    with services.db.session() as session:
        workers = online_workers(
            session, stale_after_seconds=max(15.0, services.settings.reap_interval_seconds * 3)
        )
        served = {m for w in workers for m in w.models or []}
    for model in sorted(models - served):
        click.echo(f"warning: no worker is online for {model}; its jobs wait until one starts", err=True)


@batch_group.command("resume")
@click.argument("batch_id")
@watch_options
def resume(batch_id: str, wait: bool, timeout: float, as_json: bool) -> None:
    """Queue what an interrupted batch has not run yet; finished cases are not run again."""
    from jobservice.nightly.service import parse_batch_id, resume_batch

    services = cli_services()
    with clear_errors():
        batch = resume_batch(services, parse_batch_id(batch_id))
    _finish(services, batch.id, wait=wait, timeout=timeout, as_json=as_json)


@batch_group.command("status")
@click.argument("batch_id")
@watch_options
def status(batch_id: str, wait: bool, timeout: float, as_json: bool) -> None:
    """Show a batch's progress (or wait for it) and, once finished, its verdicts.

    Exit status once finished: 0 passed (or no baseline yet), 1 regressed or failed, 3 inconclusive.
    """
    from jobservice.nightly.service import parse_batch_id

    services = cli_services()
    with clear_errors():
        _finish(services, parse_batch_id(batch_id), wait=wait, timeout=timeout, as_json=as_json)


@batch_group.command("list")
@click.option("--name", default=None, help="Only runs of this spec.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 500))
def list_command(name: str | None, limit: int) -> None:
    """Batches, newest first."""
    from jobservice.nightly.presenters import list_batches

    services = cli_services()
    with clear_errors(), services.db.session() as session:
        rows = list_batches(session, name=name, limit=limit)
    for b in rows:
        pin = " pinned" if b.pinned else ""
        click.echo(
            f"{b.id}  {b.created_at:%Y-%m-%d %H:%M}  {b.name:<24} {b.status:<9} {b.verdict or '-'}{pin}"
        )


@batch_group.command("report")
@click.argument("batch_id")
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "json"]), default="md", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
def report(batch_id: str, fmt: str, output: Path | None) -> None:
    """Print (or save) a finished batch's report: Markdown, CSV or JSON."""
    from jobservice.nightly.render import render_csv, render_json, render_markdown

    services = cli_services()
    with clear_errors():
        batch = _finished(services, batch_id)
    renderers: dict[str, Callable[[Any], str]] = {
        "md": render_markdown,
        "csv": render_csv,
        "json": render_json,
    }
    text = renderers[fmt](batch)
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        click.echo(f"wrote {output}", err=True)


@batch_group.command("compare")
@click.argument("baseline")
@click.argument("candidate")
@click.option("-v", "--verbose", is_flag=True, help="Show every metric's medians, change and threshold.")
@click.option("--json", "as_json", is_flag=True)
def compare(baseline: str, candidate: str, verbose: bool, as_json: bool) -> None:
    """Compare CANDIDATE with BASELINE (for CI gates).

    The two runs are judged alone: CANDIDATE against BASELINE's runs with the drift between two
    runs assumed (the cold start's rule); a night's own verdict, against its history, is in
    `jobservice batch status`.

    Exit status: 0 passed, 1 a case regressed or failed, 3 inconclusive (no regression seen, but a
    case could not rule out a slowdown of ok_within; the reasons say what would decide it).
    """
    from jobservice.nightly.compare import Night, compare_results, gate_exit_code
    from jobservice.nightly.render import render_comparison_text

    services = cli_services()
    with clear_errors():
        old, new = _finished(services, baseline), _finished(services, candidate)
    result = compare_results(old.results, new.results, spec=new.spec, night=Night(use_history=False))
    if as_json:
        click.echo(json.dumps({**result, "baseline_id": str(old.id), "candidate_id": str(new.id)}, indent=2))
    else:
        click.echo(f"baseline  {old.id} ({old.name}, {old.created_at:%Y-%m-%d %H:%M})")
        click.echo(f"candidate {new.id} ({new.name}, {new.created_at:%Y-%m-%d %H:%M})\n")
        click.echo(render_comparison_text(result, verbose=verbose))
    sys.exit(gate_exit_code(result))


@batch_group.command("pin")
@click.argument("batch_id")
@click.option("--unpin", is_flag=True, help="Undo: the history reaches back past it again.")
def pin(batch_id: str, unpin: bool) -> None:
    """Accept a finished batch as the new normal: its cases' history restarts at it (and until they
    have 5 runs again, it is their baseline)."""
    from jobservice.nightly.pins import pin_batch
    from jobservice.nightly.service import parse_batch_id

    services = cli_services()
    with clear_errors():
        batch = pin_batch(services, parse_batch_id(batch_id), pinned=not unpin)
    if batch.pinned:
        click.echo(
            f"batch {batch.id} ({batch.name}) is accepted as the new normal: later runs are judged "
            "against it and the runs after it (their history restarts here)"
        )
    else:
        click.echo(f"batch {batch.id} ({batch.name}) is no longer pinned: the history reaches back past it")


@batch_group.command("cancel")
@click.argument("batch_id")
def cancel(batch_id: str) -> None:
    """Cancel a batch's unfinished jobs (`jobservice batch resume` runs them later)."""
    from jobservice.nightly.service import cancel_batch, parse_batch_id

    services = cli_services()
    with clear_errors():
        batch = cancel_batch(services, parse_batch_id(batch_id))
    click.echo(f"batch {batch.id}: {batch.status}")


def _finished(services: Services, raw_id: str) -> Any:
    from jobservice.nightly.finalize import refresh_batch
    from jobservice.nightly.service import parse_batch_id

    batch = refresh_batch(services, parse_batch_id(raw_id))
    if batch.status != BatchStatus.FINISHED:
        raise Conflict("batch_not_finished", f"batch {batch.id} is {batch.status}; it has no report yet")
    return batch


def _finish(services: Services, batch_id: uuid.UUID, *, wait: bool, timeout: float, as_json: bool) -> None:
    """Show (and with ``wait`` follow) a batch; exit non-zero if it ended badly."""
    from jobservice.nightly.finalize import refresh_batch
    from jobservice.nightly.presenters import batch_view

    deadline = time.monotonic() + timeout
    shown = ""  # the progress line on stderr
    with clear_errors():
        try:
            while True:
                batch = refresh_batch(services, batch_id)
                with services.db.session() as session:
                    view = batch_view(session, batch)
                ended = BatchStatus(batch.status).is_ended
                if not wait or ended:
                    break
                if time.monotonic() > deadline:
                    raise click.ClickException(f"batch {batch_id} still {batch.status} after {timeout:.0f} s")
                shown = _draw(view.model_dump(), shown)
                time.sleep(1.0)
        except KeyboardInterrupt:
            sys.stderr.write(
                f"\nstopped watching; the batch goes on (jobservice batch status {batch_id} --wait)\n"
            )
            sys.exit(130)
    if wait:
        _draw(view.model_dump(), shown)
        sys.stderr.write("\n")
    click.echo(
        json.dumps(view.model_dump(mode="json"), indent=2) if as_json else _describe(view.model_dump())
    )
    if ended and batch.status == BatchStatus.FINISHED and batch.verdict == "inconclusive":
        sys.exit(EXIT_INCONCLUSIVE)
    if ended and (batch.status != BatchStatus.FINISHED or batch.verdict not in GOOD):
        sys.exit(1)


def _draw(view: dict[str, Any], previous: str) -> str:
    p = view["progress"]
    done = p["succeeded"] + p["failed"] + p["canceled"]
    words = f"{done}/{p['total']} done · {p['running']} running · {p['queued']} queued · {p['failed']} failed"
    return draw_progress(view["name"][:24], p["fraction"], f"{words:<60}", previous)


def _describe(view: dict[str, Any]) -> str:
    from jobservice.nightly.render import episode_line

    p = view["progress"]
    lines = [
        f"batch {view['id']} ({view['name']}): {view['status']}"
        + (f", verdict {view['verdict']}" if view["verdict"] else ""),
        f"  jobs: {p['succeeded']} succeeded, {p['failed']} failed, {p['canceled']} canceled, "
        f"{p['running']} running, {p['queued']} queued of {p['total']}",
    ]
    if view["error"]:
        lines.append(f"  error: {view['error']}")
    if view["baseline_id"]:
        lines.append(f"  baseline: {view['baseline_id']}")
    for case in view["cases"]:
        if case["verdict"]:
            why = f": {'; '.join(case['reasons'])}" if case["reasons"] else ""
            lines.append(f"  {case['verdict'].upper():<12} {case['name']}{why}")
            lines += [f"  {'':<12} also: {other}" for other in case.get("others") or []]
    for episode in view.get("episodes") or []:
        lines.append(f"  episode: {episode_line(episode)}")
    for change in view["environment_changes"]:
        lines.append(f"  changed since the baseline: {change}")
    if view.get("risk"):
        lines.append(f"  {view['risk']}")
    if view["links"].get("report"):
        lines.append(f"  report: jobservice batch report {view['id']}  (or GET {view['links']['report']})")
    if view["verdict"] in ("regressed", "inconclusive") and not view["pinned"]:
        lines.append(f"  if this is the new normal: jobservice batch pin {view['id']}")
    return "\n".join(lines)


@click.command("beat")
@click.option("--loglevel", default="INFO", show_default=True)
def beat_command(loglevel: str) -> None:
    """Run the nightly schedules (JOBSERVICE_BATCH_SCHEDULES) and finish batches as they end."""
    import os

    from jobservice.nightly.schedule import CONTROL_QUEUE, parse_schedules
    from jobservice.webhooks.tasks import WEBHOOK_QUEUE

    settings = cli_services().settings
    try:
        entries = parse_schedules(settings.batch_schedules)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    for entry in entries:
        when = entry.cron or f"every {entry.every_seconds:g} s"
        click.echo(f"schedule {entry.key}: {entry.spec} at {when} ({settings.batch_timezone})", err=True)
    if not entries:
        click.echo("no JOBSERVICE_BATCH_SCHEDULES: only finishing and resuming batches", err=True)
    folder = (settings.var_dir / "beat").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, JOBSERVICE_BROKER_URL=settings.broker_url)
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "jobservice.nightly.beat_app",
        "worker",
        "--beat",
        "--schedule",
        str(folder / "schedule"),
        "--pool",
        "solo",
        "--queues",
        f"{CONTROL_QUEUE},{WEBHOOK_QUEUE}",  # webhook deliveries (jobservice.webhooks) too
        "--hostname",
        "control@%h",
        "--loglevel",
        loglevel,
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    os.execvpe(argv[0], argv, env)  # noqa: S606 - argv is fully ours
