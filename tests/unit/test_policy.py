"""The request policy (jobservice.http.api.policy.steps) is the app's only request hook, and the fast path
(jobservice.http.api.native.fast_poll) runs exactly its steps: the same ones as Flask, in the same order,
each once per request, whoever answers it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask
from werkzeug.test import Client

from jobservice.http.api.native.fast_poll import FastPoll
from jobservice.http.api.policy.steps import OTHER_HOOKS, Policy, policy_of
from tests.factories import new_job
from tests.unit.test_fast_poll import STATES, Counted, set_row

BEFORE = [
    "start_clock",
    "take_request_id",
    "refuse_unknown_host",
    "refuse_cross_site",
    "refuse_nul_in_url",
    "identify",
    "count_rate",
]
AFTER = ["echo_request_id", "nosniff", "observe"]
# What Flask calls around a request, by the scope it applies to (None: every request).
HOOK_TABLES = (
    "before_request_funcs",
    "after_request_funcs",
    "teardown_request_funcs",
    "url_value_preprocessors",
)


def qualified(function: Callable[..., Any]) -> str:
    return f"{function.__module__}.{function.__qualname__}"


def test_the_policy_is_the_apps_only_request_hook(app: Flask) -> None:
    """A hook added to the app (or to the polled route's blueprint) outside the policy would be skipped
    by the fast path: it must be a step of the policy, or say in OTHER_HOOKS why polls need none of it."""
    policy = policy_of(app)
    ours = {qualified(policy.before_request), qualified(policy.after_request)}
    fast = app.wsgi_app
    assert isinstance(fast, FastPoll)
    scopes = (None, fast.blueprint)  # every request's hooks, and those of the route the fast path answers
    found = {
        qualified(hook)
        for table in HOOK_TABLES
        for scope in scopes
        for hook in getattr(app, table).get(scope, [])
    }
    found |= {qualified(hook) for hook in app.teardown_appcontext_funcs}
    unexplained = found - ours - OTHER_HOOKS.keys()
    assert not unexplained, (
        f"request hooks outside the policy: {sorted(unexplained)}; the fast path would skip them. Make each "
        "a step of jobservice/http/api/policy/steps.py (or, if a plain GET /jobs/<id> needs none of it, list it "
        "in OTHER_HOOKS with the reason)."
    )
    assert ours <= found  # and the policy's hooks are installed
    assert app.before_request_funcs[None][0] == policy.before_request  # first: its clock wraps the rest
    assert app.after_request_funcs[None][0] == policy.after_request  # Flask runs it last


def test_nothing_sits_between_the_fast_path_and_flask(app: Flask) -> None:
    """WSGI middleware added beneath the fast path would be skipped by it too."""
    fast = app.wsgi_app
    assert isinstance(fast, FastPoll)
    assert (
        getattr(fast.next, "__func__", None) is Flask.wsgi_app and getattr(fast.next, "__self__", None) is app
    )
    assert fast.policy is policy_of(app)
    assert fast.route in {rule.rule for rule in app.url_map.iter_rules() if rule.endpoint == "jobs.show_job"}


class Recorded:
    """The names of the policy's steps as they run."""

    def __init__(self, policy: Policy) -> None:
        self.names: list[str] = []
        policy.steps = tuple(self.wrap(step) for step in policy.steps)
        policy.after_steps = tuple(self.wrap(step) for step in policy.after_steps)

    def wrap(self, step: Callable[..., None]) -> Callable[..., None]:
        def recorded(*args: Any) -> None:
            self.names.append(step.__name__)
            step(*args)

        return recorded

    def take(self) -> list[str]:
        names, self.names = self.names, []
        return names


@pytest.fixture
def recorded(app: Flask) -> Iterator[Recorded]:
    policy = policy_of(app)
    steps, after = policy.steps, policy.after_steps
    yield Recorded(policy)
    policy.steps, policy.after_steps = steps, after


def test_the_steps_are_the_documented_ones_in_order(app: Flask) -> None:
    policy = policy_of(app)
    assert [step.__name__ for step in policy.steps] == BEFORE
    assert [step.__name__ for step in policy.after_steps] == AFTER


def test_the_fast_path_runs_every_step_flask_runs(app: Flask, services: Any, recorded: Recorded) -> None:
    fast = app.wsgi_app
    assert isinstance(fast, FastPoll)
    calls = Counted(fast)
    job_id = new_job(services.db)
    set_row(services.db, job_id, **STATES["running"])
    assert app.test_client().get(f"/jobs/{job_id}").status_code == 200
    assert calls.calls == 0  # answered beneath Flask
    beneath = recorded.take()
    assert Client(calls.inner).get(f"/jobs/{job_id}").status_code == 200  # Flask alone
    assert recorded.take() == beneath == BEFORE + AFTER


def test_a_poll_the_fast_path_hands_to_flask_runs_each_step_once(
    app: Flask, services: Any, recorded: Recorded
) -> None:
    fast = app.wsgi_app
    assert isinstance(fast, FastPoll)
    calls = Counted(fast)
    queued = new_job(services.db)  # its position needs a query: Flask answers
    client = app.test_client()
    cases = [  # path, request, status, the last step that ran (the refusing one)
        (f"/jobs/{queued}", {}, 200, "count_rate"),
        (f"/jobs/{uuid.uuid4()}", {}, 404, "count_rate"),
        ("/jobs/0123456789abcdef0123456789abcdef0123", {}, 404, "count_rate"),  # hex, not a UUID
        (f"/jobs/{queued}", {"headers": {"Authorization": "Basic abc"}}, 401, "identify"),
        (f"/jobs/{queued}", {"headers": {"Host": "evil.example"}}, 421, "refuse_unknown_host"),
    ]
    for handed, (path, kwargs, status, last) in enumerate(cases, start=1):
        assert client.get(path, **kwargs).status_code == status, (path, kwargs)
        assert calls.calls == handed, (path, kwargs)  # Flask answered
        # The steps up to the last, each once (the fast path's), then the after-steps (Flask's hook).
        assert recorded.take() == BEFORE[: BEFORE.index(last) + 1] + AFTER, (path, kwargs)
