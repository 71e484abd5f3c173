"""The one tenant-checked loader (``jobservice.auth.owned.load_owned``): a malformed id, an unknown
one and another tenant's answer the same 404; its own tenant and an admin get the row."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from jobservice.auth.owned import load_owned
from jobservice.auth.principal import Principal
from jobservice.errors import NotFound


@dataclass
class Row:
    tenant: str


ROWS = {uuid.UUID(int=1): Row("acme")}
ALICE = Principal(tenant="acme", role="user", key_id="key_a")
BOB = Principal(tenant="beta", role="user", key_id="key_b")
ADMIN = Principal(tenant="ops", role="admin", key_id="key_o")


def missing() -> NotFound:
    return NotFound("thing_not_found", "There is no such thing here.")


def test_its_tenant_and_an_admin_get_the_row_by_a_string_or_a_uuid() -> None:
    key = uuid.UUID(int=1)
    assert load_owned(str(key), ALICE, ROWS.get, missing=missing()) is ROWS[key]
    assert load_owned(key, ADMIN, ROWS.get, missing=missing()) is ROWS[key]


@pytest.mark.parametrize(
    ("raw", "who"),
    [("nope", ALICE), (str(uuid.UUID(int=2)), ALICE), (str(uuid.UUID(int=1)), BOB), (7, ALICE), ("", ADMIN)],
)
def test_malformed_unknown_and_another_tenants_are_one_404(raw: object, who: Principal) -> None:
    with pytest.raises(NotFound) as refused:
        load_owned(raw, who, ROWS.get, missing=missing())  # type: ignore[arg-type]
    assert refused.value.code == "thing_not_found" and refused.value.status == 404
