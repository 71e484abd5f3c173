"""How commands report what they cannot do: one line and exit 1, never a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click
from sqlalchemy.exc import OperationalError

from jobservice.errors import DomainError


@contextmanager
def unavailable_database() -> Iterator[None]:
    """An unreachable or unmigrated jobs database as a one-line error (exit 1)."""
    try:
        yield
    except OperationalError as exc:
        hint = " (run `jobservice db upgrade`)" if "no such table" in str(exc.orig) else ""
        raise click.ClickException(f"the jobs database is unavailable: {exc.orig}{hint}") from None


@contextmanager
def refusals() -> Iterator[None]:
    """The service's refusals (``code: sentence``) and an unreachable database as one-line errors
    (exit 1), not tracebacks."""
    try:
        with unavailable_database():
            yield
    except DomainError as exc:
        raise click.ClickException(f"{exc.code}: {exc.message}") from None
