"""Reading manifests (``jobservice.groups.manifest``): CSV and JSON Lines into rows, and hostile
input refused with the row, line and column at fault. Pure: no database, no service."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jobservice.errors import DomainError, Invalid, TooLarge, Unsupported
from jobservice.groups.manifest import (
    MAX_CELL_CHARS,
    MAX_COLUMNS,
    MAX_REPORTED,
    Manifest,
    Problem,
    manifest_format,
    read_manifest,
    refusal,
)

MB = 2**20


def read(data: bytes | str, fmt: str = "csv", *, max_rows: int = 100, max_bytes: int = MB) -> Manifest:
    raw = data.encode() if isinstance(data, str) else data
    return read_manifest(raw, fmt, max_bytes=max_bytes, max_rows=max_rows)  # type: ignore[arg-type]


def refused(data: bytes | str, fmt: str = "csv", **limits: Any) -> DomainError:
    with pytest.raises(DomainError) as caught:
        read(data, fmt, **limits)
    return caught.value


def test_csv_rows_are_numbered_from_one_with_their_lines() -> None:
    text = '\ufeffmodel,prompt,width\r\nreference-t2v,"hills, green",64\r\n\r\nreference-t2v,"two\nlines",128\r\n'
    manifest = read(text)
    assert manifest.format == "csv" and manifest.columns == ["model", "prompt", "width"]
    assert [(r.number, r.line) for r in manifest.rows] == [(1, 2), (2, 4)]
    assert manifest.rows[0].values == {"model": "reference-t2v", "prompt": "hills, green", "width": "64"}
    assert manifest.rows[1].values["prompt"] == "two\nlines"  # a quoted cell may hold a newline
    assert manifest.problems == [] and len(manifest.sha256) == 64


def test_empty_cells_stay_empty_and_all_empty_rows_are_skipped() -> None:
    manifest = read("model,prompt,seed\nreference-t2v,a,\n,,\nreference-t2v,b,7\n")
    assert [r.values["seed"] for r in manifest.rows] == ["", "7"]
    assert [r.number for r in manifest.rows] == [1, 2]


def test_jsonl_rows_keep_their_json_types() -> None:
    lines = [
        {"model": "reference-t2v", "prompt": "a", "width": 64, "webhook_events_filter": ["completed"]},
        {"model": "reference-t2v", "prompt": "b", "seed": None},
    ]
    manifest = read("\n".join(json.dumps(x) for x in lines) + "\n\n", "jsonl")
    assert manifest.columns == ["model", "prompt", "width", "webhook_events_filter", "seed"]
    assert manifest.rows[0].values["width"] == 64 and manifest.rows[1].values["seed"] is None
    assert [(r.number, r.line) for r in manifest.rows] == [(1, 1), (2, 2)]


@pytest.mark.parametrize(
    ("content_type", "filename", "data", "expected"),
    [
        ("text/csv", None, b"{}", "csv"),
        ("application/x-ndjson", None, b"model", "jsonl"),
        ("application/octet-stream", "rows.jsonl", b"x", "jsonl"),
        (None, "rows.CSV", b"{", "csv"),
        (None, None, b'\xef\xbb\xbf  {"model": 1}', "jsonl"),
        ("text/plain", None, b"model,prompt", "csv"),
        ("application/vnd.ms-excel", "rows.csv", b"model", "csv"),  # Windows browsers
        ("application/json", "rows.jsonl", b"{}", "jsonl"),  # the name says it
    ],
)
def test_the_format_comes_from_the_type_then_the_name_then_the_first_character(
    content_type: str | None, filename: str | None, data: bytes, expected: str
) -> None:
    assert manifest_format(content_type, filename, data) == expected


def test_a_format_that_is_neither_is_refused() -> None:
    with pytest.raises(Unsupported) as caught:
        manifest_format("application/pdf", "rows.pdf", b"%PDF")
    assert caught.value.code == "unsupported_manifest_type"


# --- hostile input -------------------------------------------------------------------------------
@pytest.mark.parametrize("data", [b"", b"   \n\r\n", b"\xef\xbb\xbf"])
def test_an_empty_file_is_refused(data: bytes) -> None:
    error = refused(data)
    assert isinstance(error, Invalid) and error.code == "invalid_manifest" and "empty" in error.message


def test_a_header_without_rows_is_refused() -> None:
    assert "no rows" in refused("model,prompt\n").message


def test_bad_encoding_names_the_line() -> None:
    error = refused(b"model,prompt\nreference-t2v,ok\nreference-t2v,caf\xe9\n")
    assert error.code == "invalid_manifest" and "line 3" in error.message and "UTF-8" in error.message
    assert error.details[0]["line"] == 3


def test_a_nul_character_is_refused_by_line() -> None:
    assert "Line 2" in refused(b"model,prompt\nreference-t2v,a\x00b\n").message


@pytest.mark.parametrize(
    ("header", "why"),
    [
        ("model,,prompt", "'(empty)'"),
        ("model,prompt;width", "not a column name"),
        ("model,prompt,prompt", "more than once"),
        ("model," + ",".join(f"c{i}" for i in range(MAX_COLUMNS)), f"at most {MAX_COLUMNS}"),
    ],
)
def test_wrong_columns_in_the_header_are_refused(header: str, why: str) -> None:
    error = refused(header + "\nreference-t2v,x\n")
    assert error.code == "invalid_manifest" and why in error.message
    assert error.details[0]["line"] == 1


def test_a_manifest_without_a_model_column_is_refused() -> None:
    error = refused("prompt,width\nhills,64\n")
    assert "no 'model' column" in error.message and "prompt, width" in error.message


def test_rows_with_the_wrong_number_of_cells_are_row_problems() -> None:
    manifest = read("model,prompt,width\nreference-t2v,a\nreference-t2v,b,64,extra\nreference-t2v,c,64\n")
    assert [r.number for r in manifest.rows] == [3]
    assert [(p.row, p.line, p.code) for p in manifest.problems] == [
        (1, 2, "wrong_cell_count"),
        (2, 3, "wrong_cell_count"),
    ]
    assert "2 cells; the header has 3" in manifest.problems[0].message


def test_a_huge_cell_is_a_problem_of_its_row_and_column() -> None:
    manifest = read(f"model,prompt\nreference-t2v,{'x' * (MAX_CELL_CHARS + 1)}\nreference-t2v,ok\n")
    assert [(p.row, p.column, p.code) for p in manifest.problems] == [(1, "prompt", "cell_too_long")]
    assert [r.number for r in manifest.rows] == [2]


def test_a_broken_quote_is_refused_with_its_row() -> None:
    error = refused('model,prompt\nreference-t2v,"never closed\n')
    assert error.code == "invalid_manifest" and "Row 1 (line 2)" in error.message


def test_more_rows_than_the_limit_are_refused_before_reading_on() -> None:
    error = refused("model,prompt\n" + "reference-t2v,x\n" * 6, max_rows=5)
    assert error.code == "too_many_rows" and "more than 5 rows" in error.message and "line 7" in error.message


def test_a_manifest_over_the_byte_limit_is_refused() -> None:
    error = refused("model,prompt\n" + "reference-t2v,x\n" * 100, max_bytes=100)
    assert isinstance(error, TooLarge) and error.code == "manifest_too_large"


@pytest.mark.parametrize(
    ("line", "code", "column"),
    [
        ("[1, 2]", "invalid_json", None),
        ('{"model": "reference-t2v", "prompt": ', "invalid_json", None),
        ('{"model": "reference-t2v", "width": NaN}', "invalid_json", None),
        ('{"model": "reference-t2v", "width": 1e999}', "invalid_json", None),
        ('{"model": "reference-t2v", "bad key": 1}', "invalid_column", "bad key"),
        ('{"model": "reference-t2v", "prompt": "a\\u0000b"}', "invalid_text", "prompt"),
        ('{"model": "reference-t2v", "x": ' + "[" * 10 + "]" * 10 + "}", "invalid_json", "x"),
        (
            '{"model": "reference-t2v", "prompt": "' + "x" * (MAX_CELL_CHARS + 1) + '"}',
            "cell_too_long",
            "prompt",
        ),
    ],
)
def test_hostile_json_lines_are_problems_of_their_row(line: str, code: str, column: str | None) -> None:
    good = '{"model": "reference-t2v", "prompt": "ok"}'
    manifest = read(f"{good}\n{line}\n{good}\n", "jsonl")
    assert [(p.row, p.line, p.code, p.column) for p in manifest.problems] == [(2, 2, code, column)]
    assert [r.number for r in manifest.rows] == [1, 3]


def test_a_very_long_json_line_is_a_problem() -> None:
    manifest = read('{"model": "reference-t2v", "prompt": "' + "x" * 70_000 + '"}\n{"model": "m"}\n', "jsonl")
    assert manifest.problems[0].code == "row_too_long" and len(manifest.rows) == 1


def test_only_bad_rows_is_refused_with_their_problems() -> None:
    error = refused("[1]\n[2]\n", "jsonl")
    assert error.code == "invalid_manifest" and [d["row"] for d in error.details] == [1, 2]


def test_a_refusal_lists_at_most_a_hundred_problems_and_says_how_many() -> None:
    problems = [Problem(n, n + 1, "width", "invalid_parameters", "too wide") for n in range(1, 151)]
    error = refusal(problems)
    assert len(error.details) == MAX_REPORTED and "149 more problem(s)" in error.message
    assert error.message.startswith("Row 1 (line 2), column 'width': too wide. (149 more problem(s);")
    assert error.details[0] == {
        "row": 1,
        "line": 2,
        "column": "width",
        "field": "width",
        "type": "invalid_parameters",
        "message": "too wide",
    }
