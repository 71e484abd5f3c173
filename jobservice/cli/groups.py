"""``jobservice submit --manifest`` and ``jobservice group ...``: job groups through the API.

Like ``jobservice submit``, these go through ``jobservice.client.Client`` (``JOBSERVICE_URL``,
``JOBSERVICE_API_KEY``): the manifest is sent as it is, every row is checked by the service before
any job exists, and a refused manifest is printed one problem per line (row, column, what is wrong).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import requests

from jobservice.cli.client import ClientError, client_for, draw_progress
from jobservice.client import ApiError, GroupView, WaitTimeout

DEFAULT_URL = "http://127.0.0.1:8000"
url_option = click.option("--url", default=DEFAULT_URL, show_default=True, envvar="JOBSERVICE_URL")


@contextlib.contextmanager
def group_errors(base_url: str) -> Iterator[None]:
    """API refusals as CLI errors (exit 1): a refused manifest with one line per problem."""
    try:
        yield
    except ApiError as exc:
        lines = [str(exc)]
        for detail in exc.details if exc.code == "invalid_manifest" else []:
            if isinstance(detail, dict):
                lines.append("  " + problem_line(detail))
        raise ClientError("\n".join(lines)) from None
    except requests.RequestException as exc:
        raise ClientError(f"cannot reach {base_url}: {exc.__class__.__name__}") from None
    except WaitTimeout as exc:
        status = getattr(exc.last, "status", "unfinished")
        raise ClientError(f"the group is still {status}: {exc}") from None


def problem_line(detail: dict[str, Any]) -> str:
    """``row 3 (line 4), column width: Input should be a multiple of 16``."""
    where = f"row {detail.get('row')} (line {detail.get('line')})" if detail.get("row") else "manifest"
    if detail.get("column"):
        where += f", column {detail['column']}"
    return f"{where}: {detail.get('message', '')}"


def describe(group: GroupView, base_url: str) -> str:
    """A human summary of a group."""
    p = group.progress
    lines = [
        f"group {group.id} ({group.name or 'unnamed'}): {group.status}, {p.total} jobs "
        f"({', '.join(f'{n} {m}' for m, n in group.models.items())})",
        f"  {p.queued} queued, {p.running} running, {p.succeeded} succeeded, {p.failed} failed, "
        f"{p.canceled} canceled",
    ]
    root = base_url.rstrip("/")
    lines.append(f"  results: {root}{group.links['results']}")
    lines.append(f"  outputs: {root}{group.links['outputs']}")
    return "\n".join(lines)


def _draw(group: GroupView, previous: str) -> str:
    p = group.progress
    counts = (
        f"{p.queued} queued, {p.running} running, {p.succeeded} ok, {p.failed} failed, {p.canceled} canceled"
    )
    return draw_progress(group.id[:8], p.fraction, f"{counts:<60}", previous)


def follow_group(base_url: str, group_id: str, *, timeout: float) -> GroupView:
    """Follow the group until every job has ended, drawing a progress line on stderr."""
    shown = [""]

    def draw(view: GroupView) -> None:
        shown[0] = _draw(view, shown[0])

    with group_errors(base_url), client_for(base_url) as api:
        group = api.wait_group(group_id, timeout=timeout, on_update=draw)
    if shown[0]:
        sys.stderr.write("\n")
    return group


def collect(base_url: str, group: GroupView, *, results: Path | None, outputs: Path | None) -> None:
    """Save the results CSV and the zip of outputs where asked."""
    with group_errors(base_url), client_for(base_url) as api:
        if results is not None:
            response = api.http.call("GET", group.links["results"])
            results.write_bytes(response.content)
            click.echo(f"saved results to {results}", err=True)
        if outputs is not None:
            api.download_group_outputs(group.id, outputs)
            click.echo(f"saved outputs to {outputs}", err=True)


def submit_manifest(
    base_url: str,
    manifest: Path,
    *,
    name: str | None,
    wait: bool,
    timeout: float,
    results: Path | None,
    outputs: Path | None,
    as_json: bool,
) -> None:
    """``jobservice submit --manifest``: create the group, then (``wait``) follow it and collect."""
    with group_errors(base_url), client_for(base_url) as api:
        group = api.submit_group(manifest, name=name)
    click.echo(f"submitted group {group.id}: {group.progress.total} jobs", err=True)
    if wait:
        group = follow_group(base_url, group.id, timeout=timeout)
        collect(base_url, group, results=results, outputs=outputs)
    click.echo(group.model_dump_json(indent=2) if as_json else describe(group, base_url))
    if wait and (group.status != "finished" or group.progress.succeeded != group.progress.total):
        sys.exit(1)


@click.group("group")
def group_group() -> None:
    """Job groups (many jobs from one manifest): status, cancel, results, outputs, list."""


@group_group.command("status")
@click.argument("group_id")
@url_option
@click.option(
    "--follow", is_flag=True, help="Follow it until every job has ended (exit 1 unless all succeeded)."
)
@click.option("--timeout", default=24 * 3600.0, show_default=True, help="Seconds --follow waits.")
@click.option("--json", "as_json", is_flag=True)
def status_command(group_id: str, url: str, follow: bool, timeout: float, as_json: bool) -> None:
    """Show a group's progress."""
    if follow:
        group = follow_group(url, group_id, timeout=timeout)
    else:
        with group_errors(url), client_for(url) as api:
            group = api.get_group(group_id)
    click.echo(group.model_dump_json(indent=2) if as_json else describe(group, url))
    if follow and group.progress.succeeded != group.progress.total:
        sys.exit(1)


@group_group.command("cancel")
@click.argument("group_id")
@url_option
def cancel_command(group_id: str, url: str) -> None:
    """Cancel every unfinished job of a group."""
    with group_errors(url), client_for(url) as api:
        group = api.cancel_group(group_id)
    click.echo(describe(group, url))


@group_group.command("results")
@click.argument("group_id")
@url_option
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
def results_command(group_id: str, url: str, output: Path | None) -> None:
    """The results CSV (row, job id, status, verdict, video URL, usage), to stdout or a file."""
    with group_errors(url), client_for(url) as api:
        text = api.http.call("GET", f"/job-groups/{group_id}/results").text
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text)


@group_group.command("outputs")
@click.argument("group_id")
@url_option
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True)
def outputs_command(group_id: str, url: str, output: Path) -> None:
    """Save the zip of a group's videos (and results.csv)."""
    with group_errors(url), client_for(url) as api:
        api.download_group_outputs(group_id, output)
    click.echo(f"saved outputs to {output}", err=True)


@group_group.command("list")
@url_option
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100))
@click.option("--json", "as_json", is_flag=True)
def list_command(url: str, limit: int, as_json: bool) -> None:
    """Your groups, newest first."""
    with group_errors(url), client_for(url) as api:
        page = api.list_groups(limit=limit)
    if as_json:
        click.echo(json.dumps([g.model_dump(mode="json") for g in page.groups], indent=2))
        return
    for g in page.groups:
        p = g.progress
        click.echo(f"{g.id}  {g.status:<9} {p.succeeded + p.failed + p.canceled}/{p.total}  {g.name}")
