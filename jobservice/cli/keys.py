"""``jobservice keys``: create (the secret is printed once), list and revoke API keys."""

from __future__ import annotations

import json
from typing import Any

import click

from jobservice.auth.keys import create_key, list_keys, revoke_key
from jobservice.cli.errors import refusals
from jobservice.cli.tenants import limit_options
from jobservice.db.engine import Database
from jobservice.db.tables import ApiKey
from jobservice.settings import Settings


def _row(key: ApiKey) -> dict[str, Any]:
    return {
        "id": key.id,
        "name": key.name,
        "tenant": key.tenant,
        "role": key.role,
        "hint": key.hint,
        "limits": dict(key.limits or {}),
        "created_at": key.created_at.isoformat(),
        "last_used_at": key.last_used_at.isoformat() if key.last_used_at else None,
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
    }


@click.group("keys")
def keys_group() -> None:
    """API keys: clients send `Authorization: Bearer <key>`."""


@keys_group.command("create")
@click.option("--name", required=True, help="What the key is for (a person, a script, a CI job).")
@click.option("--tenant", default="default", show_default=True, help="The tenant its jobs belong to.")
@click.option("--role", type=click.Choice(["user", "admin"]), default="user", show_default=True)
@limit_options(prefix="Override: ")
@click.option("--json", "as_json", is_flag=True, help="Print the key (secret included) as JSON.")
def create_command(name: str, tenant: str, role: str, as_json: bool, **limits: Any) -> None:
    """Create a key and print its secret: the only time it is shown (only a hash is stored)."""
    settings = Settings()
    with refusals(), Database(settings.resolved_database_url()).session() as session:
        given = {k: v for k, v in limits.items() if v is not None}
        key, secret = create_key(session, name=name, tenant=tenant, role=role, limits=given)  # type: ignore[arg-type]
        shown = _row(key)
    if as_json:
        click.echo(json.dumps({**shown, "secret": secret}, indent=2))
        return
    click.echo(secret)
    click.echo(
        f"created {shown['id']} ({shown['name']}, tenant {shown['tenant']}, role {shown['role']}); "
        "the secret above is shown only now: store it safely",
        err=True,
    )


@keys_group.command("list")
@click.option("--tenant", default=None, help="Only this tenant's keys.")
@click.option("--json", "as_json", is_flag=True)
def list_command(tenant: str | None, as_json: bool) -> None:
    """Every key (never its secret), oldest first; revoked ones marked."""
    settings = Settings()
    with refusals(), Database(settings.resolved_database_url()).session() as session:
        rows = [_row(k) for k in list_keys(session, tenant=tenant)]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no keys yet: jobservice keys create --name NAME [--tenant T] [--role admin]")
    for r in rows:
        state = f"revoked {r['revoked_at'][:19]}" if r["revoked_at"] else "active"
        used = f"last used {r['last_used_at'][:19]}" if r["last_used_at"] else "never used"
        click.echo(
            f"{r['id']}  {r['hint']:<12} {r['tenant']:<16} {r['role']:<6} {state:<28} {used}  {r['name']}"
        )


@keys_group.command("revoke")
@click.argument("key_id")
def revoke_command(key_id: str) -> None:
    """Revoke KEY_ID at once (API processes stop accepting it within 5 seconds)."""
    settings = Settings()
    with refusals(), Database(settings.resolved_database_url()).session() as session:
        key = revoke_key(session, key_id)
        click.echo(f"revoked {key.id} ({key.name}, tenant {key.tenant})")
