"""``jobservice webhooks secret``: print a tenant's webhook signing secret (created on first use)."""

from __future__ import annotations

import click

from jobservice.cli.errors import refusals
from jobservice.db.engine import Database
from jobservice.settings import Settings
from jobservice.webhooks.tenant_secrets import GRACE, current_secret, rotate_secret


@click.group("webhooks")
def webhooks_group() -> None:
    """Webhooks: the secret receivers verify `webhook-signature` with (Standard Webhooks)."""


@webhooks_group.command("secret")
@click.option("--tenant", default=None, help="Whose secret (default: JOBSERVICE_DEFAULT_TENANT).")
@click.option("--rotate", is_flag=True, help="Make a new secret; the old one also signs for 24 hours.")
def secret_command(tenant: str | None, rotate: bool) -> None:
    """Print the tenant's `whsec_...` secret, creating it on first use (or a new one with --rotate)."""
    settings = Settings()
    tenant = tenant or settings.default_tenant
    with refusals(), Database(settings.resolved_database_url()).session() as session:
        row = rotate_secret(session, tenant) if rotate else current_secret(session, tenant)
        secret = row.secret
    click.echo(secret)
    if rotate:
        hours = int(GRACE.total_seconds() // 3600)
        click.echo(
            f"rotated the webhook secret of tenant {tenant}; the previous one also signs for {hours} h",
            err=True,
        )
