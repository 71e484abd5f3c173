"""The verified caller of a request: a tenant, a role, and the key that proved it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from jobservice.errors import Invalid

Role = Literal["user", "admin"]
ROLES: tuple[Role, ...] = ("user", "admin")
TENANT_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class Principal:
    """A caller. ``key_id`` is None only when authentication is off (then it is the admin)."""

    tenant: str
    role: Role
    key_id: str | None = None
    key_name: str = ""
    limits: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_admin(self) -> bool:
        """Admins see every tenant's jobs, worker details and deployment details."""
        return self.role == "admin"

    @property
    def actor(self) -> str:
        """What job events record as having done something: the key id, or ``anonymous``."""
        return self.key_id or "anonymous"

    def owns(self, tenant: str) -> bool:
        """Whether this caller may see a thing belonging to ``tenant``."""
        return self.is_admin or tenant == self.tenant

    def scope(self) -> str | None:
        """The tenant that listings are restricted to; None for an admin (everything)."""
        return None if self.is_admin else self.tenant


def anonymous(tenant: str) -> Principal:
    """The caller when authentication is off: admin of ``tenant`` (loopback use, `jobservice up`)."""
    return Principal(tenant=tenant, role="admin")


def check_tenant(name: str) -> str:
    """``name`` if it is a valid tenant name (lowercase letters, digits, ``_.-``; 1-64 characters)."""
    if not TENANT_PATTERN.match(name):
        raise Invalid(
            "invalid_tenant",
            "A tenant name is 1-64 characters: lowercase letters, digits, '_', '.' or '-', "
            "starting with a letter or digit.",
            field="tenant",
        )
    return name
