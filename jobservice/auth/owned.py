"""The one tenant-checked loader: the thing a URL names, if the caller may see it.

Jobs, videos, job groups, batches and uploads belong to a tenant. A caller sees its own tenant's
(an admin every tenant's); another tenant's thing is no thing, so it answers exactly as an unknown
id does: the same 404, code and sentence, whether the id was malformed, unknown or someone else's.
Each kind says how its row is read (a job by the poll path's connection, a group in a session...);
the id, the tenant rule and the refusal are here, once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Protocol, TypeVar

from jobservice.auth.principal import Principal
from jobservice.errors import NotFound


class Tenanted(Protocol):
    """A row that belongs to a tenant."""

    @property
    def tenant(self) -> str:
        """The tenant it belongs to."""
        ...


R = TypeVar("R", bound=Tenanted)


def load_owned(
    raw_id: str | uuid.UUID, principal: Principal, read: Callable[[uuid.UUID], R | None], *, missing: NotFound
) -> R:
    """The row ``read`` finds for the id ``raw_id`` if ``principal`` may see it; ``missing`` (a 404)
    when the id is not a UUID, names nothing, or names another tenant's."""
    try:
        row_id = raw_id if isinstance(raw_id, uuid.UUID) else uuid.UUID(raw_id)
    except (ValueError, TypeError, AttributeError):  # a JSON body's id may be any value
        raise missing from None
    row = read(row_id)
    if row is None or not principal.owns(row.tenant):
        raise missing
    return row
