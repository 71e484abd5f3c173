"""Reading a manifest: CSV or JSON Lines, one job per row, every problem named by row and column.

A manifest is a table. Its columns are ``model`` (or ``task``, for the task's default model), the
file inputs (``image``, ``audio``: references to stored objects, ``jobservice.groups.inputs``), the
fields ``POST /jobs`` takes beside the parameters (``webhook``, ``webhook_events_filter``,
``retry_on_validation_failure``), and the model's parameters: any other column, checked by the
model's schema exactly as a field of ``POST /jobs`` is (``jobservice.groups.plan``).

- **CSV**: UTF-8 (a byte-order mark is allowed: spreadsheets write one), a header row naming the
  columns, then one row per job. Every cell is text, as in a form post (the model's schema reads
  ``64`` as the number 64, as it does for multipart); an empty cell is a parameter not given (the
  model's default), and a row whose cells are all empty is skipped.
- **JSON Lines**: one JSON object per line, its keys the columns; values keep their JSON types and
  ``null`` is a parameter not given. Blank lines are skipped.

Rows are numbered from 1 (the first job), whatever the format; a problem also names the ``line``
of the file the row starts on. What makes the whole manifest unreadable (not UTF-8, no header, a
header that names no model column, more rows than ``group_max_rows``) is refused at once; problems
of single rows (a cell too long, a row with the wrong number of cells, a line that is not a JSON
object) are collected with those the rows' checks find, so one answer lists them all.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from jobservice.errors import Invalid, TooLarge, Unsupported

Format = Literal["csv", "jsonl"]
FORMATS: tuple[Format, ...] = ("csv", "jsonl")
# Content types a manifest may be sent as (the part's or the body's); anything else is sniffed.
# Browsers on Windows send a .csv file as Excel's type.
CSV_TYPES = frozenset({"text/csv", "application/csv", "application/vnd.ms-excel"})
JSONL_TYPES = frozenset(
    {"application/jsonl", "application/x-jsonl", "application/x-ndjson", "application/jsonlines"}
)
MAX_COLUMNS = 64
MAX_CELL_CHARS = 10_000  # a prompt is at most 2,000 characters; a cell past this is an error
MAX_LINE_CHARS = 65_536  # one JSON Lines row
MAX_JSON_DEPTH = 8
COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MODEL_COLUMNS = ("model", "task")


@dataclass(frozen=True)
class Row:
    """One job of the manifest: its number (1: the first job), the line it starts on, its cells."""

    number: int
    line: int
    values: dict[str, Any]


@dataclass(frozen=True)
class Problem:
    """What is wrong with one row (and column, when one cell is at fault)."""

    row: int
    line: int
    column: str | None
    code: str
    message: str

    def detail(self) -> dict[str, Any]:
        """The problem as an entry of an error's ``details`` (``field``: its column)."""
        return {
            "row": self.row,
            "line": self.line,
            "column": self.column,
            "field": self.column or "(row)",
            "type": self.code,
            "message": self.message,
        }

    def sentence(self) -> str:
        """``Row 3 (line 4), column 'width': ...``."""
        where = f"Row {self.row} (line {self.line})"
        if self.column:
            where += f", column '{self.column}'"
        return f"{where}: {self.message}"


@dataclass
class Manifest:
    """A manifest read into rows; ``problems``: rows that could not be read as a job at all."""

    format: Format
    columns: list[str]
    rows: list[Row]
    sha256: str
    problems: list[Problem] = field(default_factory=list)


MAX_REPORTED = 100  # problems listed in one answer (the message says how many there were)


def refusal(problems: list[Problem]) -> Invalid:
    """422 ``invalid_manifest``: the first problem in a sentence, every problem (up to
    ``MAX_REPORTED``) in ``details``; nothing was created."""
    first = problems[0].sentence()
    first += "" if first.endswith((".", "!", "?", ")")) else "."
    more = f" ({len(problems) - 1} more problem(s) in details.)" if len(problems) > 1 else ""
    if len(problems) > MAX_REPORTED:
        more = f" ({len(problems) - 1} more problem(s); the first {MAX_REPORTED} are in details.)"
    return Invalid(
        "invalid_manifest",
        f"{first}{more} Nothing was created.",
        details=[p.detail() for p in problems[:MAX_REPORTED]],
    )


def _unreadable(message: str, *, line: int | None = None) -> Invalid:
    details = [{"field": "(manifest)", "line": line, "type": "unreadable", "message": message}]
    return Invalid("invalid_manifest", f"{message} Nothing was created.", details=details)


def manifest_format(content_type: str | None, filename: str | None, data: bytes) -> Format:
    """The format of a manifest: by its content type, else its file name, else its first character
    (``{``: JSON Lines; anything else: CSV). A type that is neither, on a file whose name says
    neither, is refused (415)."""
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind in CSV_TYPES:
        return "csv"
    if kind in JSONL_TYPES:
        return "jsonl"
    suffix = (filename or "").rsplit(".", 1)[-1].lower() if "." in (filename or "") else ""
    if suffix == "csv":
        return "csv"
    if suffix in ("jsonl", "ndjson"):
        return "jsonl"
    if kind and kind not in ("application/octet-stream", "text/plain"):
        raise Unsupported(
            "unsupported_manifest_type",
            f"A manifest is CSV (text/csv) or JSON Lines (application/x-ndjson), not {kind}.",
        )
    head = data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    return "jsonl" if head == b"{" else "csv"


def read_manifest(data: bytes, fmt: Format, *, max_bytes: int, max_rows: int) -> Manifest:
    """Read ``data`` as a manifest of ``fmt``; refuses what cannot be read at all (see the module
    docstring) and keeps the problems of single rows in ``Manifest.problems``."""
    if len(data) > max_bytes:
        raise TooLarge(
            "manifest_too_large",
            f"The manifest is larger than {max_bytes // 2**20} MB; split it into groups.",
        )
    text = _text(data)
    digest = hashlib.sha256(data).hexdigest()
    if not text.strip():
        raise _unreadable("The manifest is empty: it needs a header row and one row per job.")
    reader = _csv_rows if fmt == "csv" else _jsonl_rows
    manifest = Manifest(format=fmt, columns=[], rows=[], sha256=digest)
    for item in reader(text, manifest):
        if isinstance(item, Problem):
            manifest.problems.append(item)
            continue
        if len(manifest.rows) >= max_rows:
            raise Invalid(
                "too_many_rows",
                f"The manifest has more than {max_rows} rows (at line {item.line}); split it into groups. "
                "Nothing was created.",
                details=[{"field": "(manifest)", "line": item.line, "type": "too_many_rows", "message": ""}],
            )
        manifest.rows.append(item)
    if not manifest.rows:
        if manifest.problems:
            raise refusal(manifest.problems)
        raise _unreadable("The manifest has no rows: add one row per job below the header.")
    if not any(name in manifest.columns for name in MODEL_COLUMNS):
        raise _unreadable(
            "The manifest has no 'model' column (or 'task', for the task's default model); "
            f"its columns are {', '.join(manifest.columns) or 'none'}."
        )
    return manifest


def _text(data: bytes) -> str:
    """UTF-8 text (a leading byte-order mark dropped), refused by the line where it is not."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise _unreadable(
            f"The manifest is not UTF-8 text: line {line} holds bytes that are not (save it as UTF-8).",
            line=line,
        ) from None
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise _unreadable(f"Line {line} of the manifest holds a NUL character.", line=line)
    return text


def _header(cells: list[str], line: int) -> list[str]:
    names = [cell.strip() for cell in cells]
    if len(names) > MAX_COLUMNS:
        raise _unreadable(f"The header has {len(names)} columns; at most {MAX_COLUMNS} are read.", line=line)
    for position, name in enumerate(names, start=1):
        if not COLUMN_NAME.match(name):
            shown = name[:40] or "(empty)"
            raise _unreadable(
                f"Column {position} of the header, '{shown}', is not a column name (letters, digits "
                "and '_', starting with a letter; e.g. model, prompt, image).",
                line=line,
            )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise _unreadable(f"The header names the column '{repeated[0]}' more than once.", line=line)
    return names


def _csv_rows(text: str, manifest: Manifest) -> Iterator[Row | Problem]:
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    number, start = 0, 1
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # an unclosed quote, a field past csv's own size limit
            if not manifest.columns:
                raise _unreadable(f"The header row cannot be read as CSV: {exc}.", line=start) from None
            number += 1
            yield Problem(number, start, None, "invalid_csv", f"This row cannot be read as CSV: {exc}.")
            return  # the reader cannot go on past a broken quote
        line, start = start, reader.line_num + 1
        if not manifest.columns:
            if not any(cell.strip() for cell in cells):
                continue  # blank lines before the header
            manifest.columns = _header(cells, line)
            continue
        if not any(cell.strip() for cell in cells):
            continue
        number += 1
        if len(cells) != len(manifest.columns):
            yield Problem(
                number,
                line,
                None,
                "wrong_cell_count",
                f"The row has {len(cells)} cells; the header has {len(manifest.columns)} columns.",
            )
            continue
        long = [
            name for name, cell in zip(manifest.columns, cells, strict=True) if len(cell) > MAX_CELL_CHARS
        ]
        if long:
            yield Problem(
                number, line, long[0], "cell_too_long", f"A cell is limited to {MAX_CELL_CHARS} characters."
            )
            continue
        yield Row(number, line, dict(zip(manifest.columns, cells, strict=True)))


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is out of range")
    return value


def _depth(value: Any, depth: int = 0) -> int:
    if isinstance(value, dict):
        return max((_depth(v, depth + 1) for v in value.values()), default=depth + 1)
    if isinstance(value, list):
        return max((_depth(v, depth + 1) for v in value), default=depth + 1)
    return depth


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def _jsonl_rows(text: str, manifest: Manifest) -> Iterator[Row | Problem]:
    known: dict[str, None] = {}
    number = 0
    for line, raw in enumerate(text.split("\n"), start=1):
        raw = raw.rstrip("\r")
        if not raw.strip():
            continue
        number += 1
        if len(raw) > MAX_LINE_CHARS:
            yield Problem(
                number, line, None, "row_too_long", f"A line is limited to {MAX_LINE_CHARS} characters."
            )
            continue
        try:
            values = json.loads(raw, parse_constant=_not_json, parse_float=_finite)
        except (ValueError, RecursionError) as exc:
            yield Problem(
                number, line, None, "invalid_json", f"The line is not valid JSON ({str(exc)[:120]})."
            )
            continue
        if not isinstance(values, dict):
            yield Problem(number, line, None, "invalid_json", "The line must be a JSON object (one job).")
            continue
        problem = _json_row_problem(values, number, line)
        if problem is not None:
            yield problem
            continue
        for name in values:
            known.setdefault(name, None)
        if len(known) > MAX_COLUMNS:
            raise _unreadable(f"The manifest's rows use more than {MAX_COLUMNS} different keys.", line=line)
        manifest.columns = list(known)
        yield Row(number, line, values)


def _json_row_problem(values: dict[str, Any], number: int, line: int) -> Problem | None:
    for name, value in values.items():
        if not COLUMN_NAME.match(name):
            return Problem(
                number,
                line,
                name[:40],
                "invalid_column",
                "Not a column name (letters, digits and '_', starting with a letter).",
            )
        if _depth(value) > MAX_JSON_DEPTH:
            return Problem(
                number, line, name, "invalid_json", f"Nested more than {MAX_JSON_DEPTH} levels deep."
            )
        if _has_nul(value):
            return Problem(number, line, name, "invalid_text", "The value holds a NUL character.")
        if isinstance(value, str) and len(value) > MAX_CELL_CHARS:
            return Problem(
                number, line, name, "cell_too_long", f"A value is limited to {MAX_CELL_CHARS} characters."
            )
    return None
