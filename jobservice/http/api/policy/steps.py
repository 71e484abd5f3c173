"""The request policy: what every request passes before its view runs, and what every answer gets.

Written once, as one ordered list of steps (``Policy.steps``, then ``Policy.after_steps``), each a
function of the request as werkzeug reads its WSGI environ (the ``Request`` Flask's ``request`` is
too) and of what the steps before it found (``CheckedRequest``):

1. ``start_clock``: the request's time starts (the metrics below).
2. ``take_request_id``: the caller's ``X-Request-Id`` (a proxy's), or a new one; a malformed one is
   a 400 (``request_ids``). Every answer carries it back, and the request's span records it.
3. ``refuse_unknown_host``: a ``Host`` we do not answer for is a 421 (``cross_site``).
4. ``refuse_cross_site``: an unsafe method sent by a browser on behalf of another site is a 403.
5. ``refuse_nul_in_url``: a NUL character in the path or a query value is a 400 (``bodies``).
6. ``identify``: the caller (``auth.caller``: the one bearer parser, the key cache, the browser's
   session), or a 401 / the sign-in page when nobody calls an endpoint that is not public.
7. ``count_rate``: one request of the caller's key counted, a 429 over its rate (``quotas.rate``).

and on the answer: ``echo_request_id`` (``X-Request-Id``), ``nosniff`` (browsers never guess a type)
and ``observe`` (the HTTP metrics, by method, URL rule and status). The tenant rule (a job, group,
batch or upload is seen only by its tenant and admins) is ``auth.owned.load_owned``, which every read
of one by id goes through (the fast path's too, by ``jobs.visible_row``).

``install`` makes the policy the app's request hooks (``create_app`` calls it first, so its clock
wraps every other hook); ``fast_poll`` runs the same steps on the environ for the one request it
answers beneath Flask. When the fast path hands a request over to Flask it hands over what the
steps decided (``DECIDED`` in the environ), so no step runs twice and a request is counted once.
tests/unit/test_policy.py fails when the app gains a request hook that is not the policy's (add a
step here instead) and checks that the fast path and Flask run the same steps in the same order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Protocol

from flask import Flask, Response, g, redirect, request, session, url_for
from werkzeug.wrappers import Request
from werkzeug.wrappers import Response as WerkzeugResponse

from jobservice.auth.principal import Principal
from jobservice.http.api import bodies
from jobservice.http.api.policy import auth, cross_site, request_ids
from jobservice.metrics.process import observe_request
from jobservice.tracing import REQUEST_ID_ENVIRON
from jobservice.wiring import Services

UNMATCHED = "<unmatched>"  # no URL rule (a 404 or 405): one label value, not one per raw path
DECIDED = "jobservice.policy"  # the environ key under which the fast path hands its CheckedRequest to Flask
# Request hooks of the app that are not steps, each with why a request the fast path answers
# (GET /jobs/<id>) needs none of it. Any other hook fails tests/unit/test_policy.py.
OTHER_HOOKS = {
    "jobservice.http.api.openai.videos._routing_refusal_in_openai_shape": (
        "reshapes refusals of /v1/ paths only; the fast path answers /jobs/<id>"
    ),
    # With tracing on (jobservice.tracing): OpenTelemetry's Flask instrumentation opens and closes a
    # request's span. Polls answered on the fast path get no span (thousands a second would drown
    # the traces); they still carry their X-Request-Id (a step).
    "opentelemetry.instrumentation.flask._wrapped_before_request.<locals>._before_request": (
        "a request's trace span (tracing on); polls are not traced"
    ),
    "opentelemetry.instrumentation.flask._wrapped_teardown_request.<locals>._teardown_request": (
        "ends a request's trace span (tracing on); polls are not traced"
    ),
}


@dataclass
class CheckedRequest:
    """What the steps found out about one request (and how Flask routed it)."""

    endpoint: str | None  # the view it goes to ("jobs.show_job"); None: no route
    blueprint: str | None
    route: str | None  # the URL rule, the metrics' route label ("/jobs/<job_id>")
    session: MutableMapping[str, Any] | None = None  # a browser's session (None without a cookie)
    started: float | None = None
    principal: Principal | None = None
    refusal: Exception | None = None  # what a step raised on the fast path, for Flask to answer
    request_id: str | None = None  # X-Request-Id: the caller's, or one made for it


class ResponseHeaders(Protocol):
    """What an after-step may do to an answer's headers: werkzeug's ``Headers`` (Flask's answers) or
    a ``HeaderList`` (the fast path's)."""

    def setdefault(self, key: str, default: Any) -> Any:
        """``key``'s value, after adding it with ``default`` when missing."""


class HeaderList(list[tuple[str, str]]):
    """An answer's headers as the WSGI list of pairs, with ``Headers.setdefault`` (case-insensitive)."""

    def setdefault(self, key: str, default: Any) -> Any:
        """``key``'s value, after adding it with ``default`` when missing."""
        lowered = key.lower()
        for name, value in self:
            if name.lower() == lowered:
                return value
        self.append((key, str(default)))
        return default


Step = Callable[[Request, CheckedRequest], None]
AfterStep = Callable[[Request, CheckedRequest, int, ResponseHeaders], None]


class Policy:
    """The steps, bound to the app's settings and services."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.hosts = cross_site.allowed_hosts(services.settings)
        self.trusted = cross_site.trusted_origins(services.settings)
        self.steps: tuple[Step, ...] = (
            self.start_clock,
            self.take_request_id,
            self.refuse_unknown_host,
            self.refuse_cross_site,
            self.refuse_nul_in_url,
            self.identify,
            self.count_rate,
        )
        self.after_steps: tuple[AfterStep, ...] = (self.echo_request_id, self.nosniff, self.observe)

    # ---------------------------------------------------------------- the steps, in order

    def start_clock(self, req: Request, checked: CheckedRequest) -> None:
        """The request's time starts."""
        checked.started = time.perf_counter()

    def take_request_id(self, req: Request, checked: CheckedRequest) -> None:
        """The request's id: the caller's ``X-Request-Id``, or a new one (400 for a malformed one)."""
        checked.request_id = request_ids.request_id(req.headers.get(request_ids.HEADER))
        req.environ[REQUEST_ID_ENVIRON] = checked.request_id  # the request's span records it

    def refuse_unknown_host(self, req: Request, checked: CheckedRequest) -> None:
        """421 for a host name not on the allow-list (DNS rebinding)."""
        cross_site.refuse_unknown_host(req.host, self.hosts)

    def refuse_cross_site(self, req: Request, checked: CheckedRequest) -> None:
        """403 for a browser's unsafe request on behalf of another site."""
        cross_site.refuse_cross_site(req.method, req.host, req.headers, self.trusted)

    def refuse_nul_in_url(self, req: Request, checked: CheckedRequest) -> None:
        """400 for a NUL character in the path or a query value."""
        bodies.refuse_nul_in_url(req.path, req.args.items(multi=True) if req.query_string else ())

    def identify(self, req: Request, checked: CheckedRequest) -> None:
        """The caller, or a 401 (the sign-in page for a browser's page) when an endpoint needs one."""
        checked.principal = auth.caller(self.services, req.headers.get("Authorization"), checked.session)
        auth.refuse_nobody(checked.principal, checked.endpoint, checked.blueprint, req.method)

    def count_rate(self, req: Request, checked: CheckedRequest) -> None:
        """The key's request rate: counted, and a 429 over it."""
        auth.count_rate(self.services, checked.principal, checked.endpoint)

    def echo_request_id(
        self, req: Request, checked: CheckedRequest, status: int, headers: ResponseHeaders
    ) -> None:
        """Every answer names its request (refusals too, once the id was read)."""
        if checked.request_id is not None:
            headers.setdefault(request_ids.HEADER, checked.request_id)

    def nosniff(self, req: Request, checked: CheckedRequest, status: int, headers: ResponseHeaders) -> None:
        """Browsers must not guess a type: a stored upload or a log served as text stays text."""
        headers.setdefault("X-Content-Type-Options", "nosniff")

    def observe(self, req: Request, checked: CheckedRequest, status: int, headers: ResponseHeaders) -> None:
        """The HTTP metrics: one request counted, and timed, under its URL rule."""
        observe_request(req.method, checked.route or UNMATCHED, status, checked.started)

    # ---------------------------------------------------------------- running them

    def check(self, req: Request, checked: CheckedRequest) -> None:
        """Run every step in order; a refusal is raised (a ``DomainError``, or ``auth.SignInFirst``)."""
        for step in self.steps:
            step(req, checked)

    def finish(self, req: Request, checked: CheckedRequest, status: int, headers: ResponseHeaders) -> None:
        """Run every after-step on an answer of ``status`` with ``headers`` (changed in place)."""
        for step in self.after_steps:
            step(req, checked, status, headers)

    # ---------------------------------------------------------------- as Flask's hooks

    def before_request(self) -> WerkzeugResponse | None:
        """Flask's hook: the steps on ``request`` (or what the fast path already decided for it)."""
        decided = request.environ.pop(DECIDED, None)
        if isinstance(decided, CheckedRequest) and decided.endpoint == request.endpoint:
            checked = decided
        else:
            rule = request.url_rule
            checked = CheckedRequest(
                request.endpoint,
                request.blueprint,
                rule.rule if rule is not None else None,
                session if request.cookies else None,
            )
            decided = None
        g.checked = checked
        try:
            if decided is None:
                self.check(request, checked)
            elif checked.refusal is not None:
                raise checked.refusal
        except auth.SignInFirst:
            return redirect(url_for("web.sign_in", next=request.full_path.rstrip("?")))
        finally:
            g.principal = checked.principal
        return None

    def after_request(self, response: Response) -> Response:
        """Flask's hook: the after-steps on ``response``."""
        checked: CheckedRequest | None = g.get("checked")
        if checked is None:  # no before_request ran (the request failed before Flask's hooks)
            rule = request.url_rule
            checked = CheckedRequest(
                request.endpoint, request.blueprint, rule.rule if rule is not None else None
            )
        self.finish(request, checked, response.status_code, response.headers)
        return response


def install(app: Flask, services: Services) -> Policy:
    """Make the policy ``app``'s request hooks; call before anything else adds hooks."""
    policy = Policy(services)
    app.extensions["jobservice_policy"] = policy
    app.before_request(policy.before_request)
    app.after_request(policy.after_request)  # Flask runs after-hooks last added first: this one last
    return policy


def policy_of(app: Flask) -> Policy:
    """The policy ``install`` gave ``app``."""
    policy: Policy = app.extensions["jobservice_policy"]
    return policy
