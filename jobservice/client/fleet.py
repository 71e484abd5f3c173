"""The client's fleet and usage calls: ``GET /fleet``, ``DELETE /fleet/groups/<id>`` and ``GET /usage``."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote

from jobservice.client.http import Transport
from jobservice.fleet.views import FleetView, RetiredCardGroupView, UsageView


class FleetCalls:
    """``/fleet`` and ``/usage``: mixed into ``Client`` (which sets ``http``)."""

    http: Transport

    def fleet(self, *, hours: float = 24.0) -> FleetView:
        """Every card group (what it may serve, holds and runs, its ledger) and every model."""
        return FleetView.model_validate(self.http.json("GET", "/fleet", params={"hours": hours}))

    def forget_group(self, group_id: str) -> RetiredCardGroupView:
        """Retire a card group whose worker is gone (admins): it leaves /fleet and /metrics, its
        history stays. ApiError 409 ``group_online`` while its worker runs, 404 ``group_not_found``."""
        path = f"/fleet/groups/{quote(group_id, safe=':@,')}"
        return RetiredCardGroupView.model_validate(self.http.json("DELETE", path))

    def usage(
        self,
        *,
        group_by: tuple[str, ...] = ("tenant", "model"),
        bucket: str = "day",
        start: datetime | None = None,
        end: datetime | None = None,
        tenant: str | None = None,
    ) -> UsageView:
        """Card-seconds per ``bucket`` (hour, day, none) and ``group_by`` keys between ``start`` and
        ``end`` (the API's defaults: the last 24 hours)."""
        return UsageView.model_validate(self.http.json("GET", "/usage", params=self._usage_query(locals())))

    def usage_csv(self, **query: Any) -> str:
        """The same report as CSV text."""
        answer = self.http.call(
            "GET", "/usage", params=self._usage_query(query), headers={"Accept": "text/csv"}
        )
        return str(answer.text)

    @staticmethod
    def _usage_query(given: dict[str, Any]) -> dict[str, str]:
        query = {
            "group_by": ",".join(given.get("group_by") or ("tenant", "model")),
            "bucket": given.get("bucket") or "day",
        }
        for name, key in (("start", "from"), ("end", "to")):
            if given.get(name) is not None:
                query[key] = given[name].isoformat()
        if given.get("tenant"):
            query["tenant"] = given["tenant"]
        return query
