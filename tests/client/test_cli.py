"""``jobservice submit`` and ``jobservice status`` go through the client: keys, stream, fallback."""

from __future__ import annotations

import json

from click.testing import CliRunner

from jobservice.cli.main import cli
from tests.client.fake_api import Reply, Seen, error_reply, fake_api, job, json_reply, sse

STREAM = {"Content-Type": "text/event-stream"}
DONE = job(
    status="succeeded",
    progress=1.0,
    validation={"verdict": "passed", "failed_checks": [], "summary": {}},
    links={"self": "/jobs/j1", "video": "/jobs/j1/video"},
)


def test_submit_waits_on_the_stream_and_prints_the_job() -> None:
    def respond(seen: Seen, index: int) -> Reply:
        if seen.method == "POST":
            return json_reply(job(), 202)
        return Reply(
            200, [sse(("1", "progress", job(status="running", progress=0.5)), ("2", "end", DONE))], STREAM
        )

    with fake_api(respond) as api:
        result = CliRunner().invoke(
            cli, ["submit", "--url", api.url, "--prompt", "hills", "-p", "width=64", "--json"], env={}
        )
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["status"] == "succeeded" and printed["id"] == "j1"
    assert api.paths() == ["POST /jobs", "GET /jobs/j1/stream"]
    body = json.loads(api.seen[0].body)
    assert body == {"task": "text2video", "prompt": "hills", "width": 64}
    assert api.seen[0].headers["Idempotency-Key"]
    assert "50.0%" in result.stderr  # the progress line, drawn from the stream's events


def test_status_follow_falls_back_to_polling_and_status_errors_are_one_line() -> None:
    def respond(seen: Seen, index: int) -> Reply:
        if seen.path == "/jobs/nope":
            return error_reply(404, "job_not_found", "There is no job 'nope'.")
        if seen.path.endswith("/stream"):
            return error_reply(404, "not_found", "no route")
        return json_reply(DONE)

    with fake_api(respond) as api:
        runner = CliRunner()
        followed = runner.invoke(cli, ["status", "j1", "--url", api.url, "--follow"], env={})
        missing = runner.invoke(cli, ["status", "nope", "--url", api.url], env={})
    assert followed.exit_code == 0, followed.output
    assert "job j1: succeeded" in followed.stdout and "validation: passed" in followed.stdout
    assert missing.exit_code == 1 and "404 job_not_found: There is no job 'nope'." in missing.stderr


def test_submit_asks_for_retries_and_the_summary_lists_each_try() -> None:
    tries = [
        {"number": n, "attempt": n, "seed": 9 + n, "verdict": "failed", "failed_checks": ["black"]}
        for n in (1, 2)
    ]
    done = {**DONE, "validation_attempts": tries, "seed_used": 12, "attempts": 3}

    def respond(seen: Seen, index: int) -> Reply:
        if seen.method == "POST":
            return json_reply(job(), 202)
        return Reply(200, [sse(("1", "end", done))], STREAM)

    with fake_api(respond) as api:
        result = CliRunner().invoke(
            cli,
            ["submit", "--url", api.url, "--prompt", "hills", "--retry-on-validation-failure", "3"],
            env={},
        )
    assert result.exit_code == 0, result.output
    assert json.loads(api.seen[0].body)["retry_on_validation_failure"] == 3
    assert (
        "try 1 seed 10 failed (black); try 2 seed 11 failed (black); try 3 seed 12: this one" in result.stdout
    )
    refused = CliRunner().invoke(cli, ["submit", "--url", "http://x", "--retry-on-validation-failure", "11"])
    assert refused.exit_code == 2 and "0<=x<=10" in refused.output


def test_delete_sends_delete_and_a_refusal_is_one_line() -> None:
    def respond(seen: Seen, index: int) -> Reply:
        if seen.path == "/jobs/running":
            return error_reply(409, "cancel_pending", "Job running was running and is being stopped.")
        return json_reply(
            {"id": "j1", "object": "job.deleted", "deleted": True, "deleted_at": "2026-12-06T09:00:00Z"}
        )

    with fake_api(respond) as api:
        runner = CliRunner()
        deleted = runner.invoke(cli, ["delete", "j1", "--url", api.url], env={})
        refused = runner.invoke(cli, ["delete", "running", "--url", api.url], env={})
    assert deleted.exit_code == 0, deleted.output
    assert "deleted j1 at 2026-12-06T09:00:00Z" in deleted.stdout
    assert api.paths() == ["DELETE /jobs/j1", "DELETE /jobs/running"]
    assert refused.exit_code == 1 and "409 cancel_pending" in refused.stderr
