"""The collaborators every entry point shares, built once from Settings and passed around.

The API, the workers, the reaper and the CLI each build one ``Services``; tests build it with
their own settings (or hand in fakes) instead of patching globals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jobservice.caches import Caches
from jobservice.catalog import Catalog
from jobservice.db.engine import Database
from jobservice.families.deployment import build_catalog
from jobservice.settings import Settings
from jobservice.storage import ObjectStore, make_store

if TYPE_CHECKING:
    from celery import Celery

    from jobservice.fleet.wake import DispatchBell
    from jobservice.quotas.rate import RateCounter


@dataclass
class Services:
    """Settings plus the database, object store, catalog, caches and Celery app built from them."""

    settings: Settings
    db: Database
    store: ObjectStore
    catalog: Catalog
    # This process's short-lived answers (keys, tenant limits, free space, the forecast): a fresh
    # Services is a fresh process.
    caches: Caches = field(default_factory=Caches)
    _celery: Celery | None = field(default=None, repr=False)
    _bell: DispatchBell | None = field(default=None, repr=False)
    _rate: RateCounter | None = field(default=None, repr=False)

    @property
    def celery(self) -> Celery:
        """The Celery app (built on first use: the API only needs it to send)."""
        if self._celery is None:
            from jobservice.broker import make_celery

            self._celery = make_celery(self.settings)
        return self._celery

    @property
    def dispatch_bell(self) -> DispatchBell:
        """The hint that a dispatch round is due (``jobservice.fleet.wake``; built on first use)."""
        if self._bell is None:
            from jobservice.fleet.wake import DispatchBell

            self._bell = DispatchBell(self.settings)
        return self._bell

    @property
    def rate_counter(self) -> RateCounter:
        """This process's count of requests per key in Redis (``jobservice.quotas.rate``; built on
        first use)."""
        if self._rate is None:
            from jobservice.quotas.rate import RateCounter

            self._rate = RateCounter(self.settings)
        return self._rate


def build_services(
    settings: Settings | None = None,
    *,
    store: ObjectStore | None = None,
    catalog: Catalog | None = None,
    celery: Celery | None = None,
    caches: Caches | None = None,
) -> Services:
    """Build the shared collaborators; anything passed in is used as is."""
    settings = settings or Settings()
    return Services(
        settings=settings,
        db=Database(settings.resolved_database_url()),
        store=store or make_store(settings),
        catalog=catalog or build_catalog(settings.catalog_extra, deployment_file=settings.deployment_file),
        caches=caches or Caches(),
        _celery=celery,
    )
