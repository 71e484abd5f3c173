"""Settings of authentication: API keys on or off (jobservice.auth, the API's key check)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class AuthSettings(BaseModel):
    """Keys and tenants.

    Read by the API's key check (`jobservice.http.api.policy.auth`, `fast_poll`), `jobservice api` (which
    refuses `auth=off` on a public address) and the CLI (docs/security.md).
    """

    auth: Literal["keys", "off"] = Field(
        default="keys",
        description="`keys`: every request needs `Authorization: Bearer <key>`; `off` (the default under "
        "`jobservice up`): anyone who reaches the port is the admin of tenant `default` (loopback only "
        "unless auth_off_anywhere).",
    )
    auth_off_anywhere: bool = Field(
        default=False, description="Allow auth=off on a non-loopback address (you put auth in front)."
    )
    default_tenant: str = Field(default="default", description="The tenant of auth=off requests.")
