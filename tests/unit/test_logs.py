"""Log lines that name their job, in text and JSON (no services needed)."""

from __future__ import annotations

import json
import logging
import sys
import threading

from jobservice.logs import JobContextFilter, JsonFormatter, current_job, job_log_context, make_formatter


def _record(message: str = "hello") -> logging.LogRecord:
    record = logging.LogRecord("workers.run.pipeline", logging.INFO, __file__, 1, message, None, None)
    JobContextFilter().filter(record)
    return record


def test_outside_a_job_lines_carry_no_job() -> None:
    record = _record()
    assert record.job_id is None and record.attempt is None  # type: ignore[attr-defined]
    assert "[job" not in make_formatter("text").format(record)
    assert "job_id" not in json.loads(JsonFormatter().format(record))


def test_inside_a_job_every_line_and_every_thread_names_it() -> None:
    seen: list[tuple[str, int] | None] = []
    with job_log_context("0b5d", 2):
        text = make_formatter("text").format(_record("claimed"))
        payload = json.loads(JsonFormatter().format(_record("claimed")))
        thread = threading.Thread(target=lambda: seen.append(current_job()))  # starts with an empty context
        thread.start()
        thread.join()
    assert "[job 0b5d attempt 2]: claimed" in text
    assert payload["job_id"] == "0b5d" and payload["attempt"] == 2 and payload["message"] == "claimed"
    assert payload["level"] == "INFO" and payload["logger"] == "workers.run.pipeline"
    assert seen == [("0b5d", 2)]
    assert current_job() is None, "the context ends with the block"


def test_json_lines_carry_the_exception() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    payload = json.loads(JsonFormatter().format(record))
    assert "ValueError: boom" in payload["exc_info"]
