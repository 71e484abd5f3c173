"""``X-Request-Id``: a request's id, taken from the caller (a proxy or a client that sets one) or made
here, and sent back on the answer, so a line in a proxy's log, the caller's and ours (and the
request's trace, ``jobservice.tracing``) name the same request. A step of the request policy
(``jobservice.http.api.policy.steps``)."""

from __future__ import annotations

import re
import uuid

from jobservice.errors import Malformed

HEADER = "X-Request-Id"
MAX_LENGTH = 200
# What proxies and clients send (nginx's $request_id is 32 hex digits, Envoy's a UUID, Heroku's
# a UUID, some add a prefix): printable, no spaces, nothing a log line or a header could be split on.
_ALLOWED = re.compile(rf"[A-Za-z0-9._:/+=@-]{{1,{MAX_LENGTH}}}")


def request_id(given: str | None) -> str:
    """``given`` if it is a well-formed id, a new one if none was sent; 400 ``invalid_request_id``
    for one that is malformed."""
    if given is None or given == "":
        return uuid.uuid4().hex
    if not _ALLOWED.fullmatch(given):
        raise Malformed(
            "invalid_request_id",
            f"X-Request-Id must be 1 to {MAX_LENGTH} letters, digits or ._:/+=@- characters; "
            "send none and one is made for the request.",
        )
    return given
