"""The shape of the code stays readable: no module over 400 lines, no function over 60.

Declarative tables are the exception: Alembic migrations (a schema written out) may be longer.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "jobservice", ROOT / "workers"]
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
TABLES = ("jobservice/db/migrations/versions/",)


def _modules() -> list[Path]:
    return sorted(p for root in SOURCES for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _is_table(path: Path) -> bool:
    return str(path.relative_to(ROOT)).startswith(TABLES)


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES and not _is_table(p)
    }
    assert not long, f"split these by responsibility: {long}"


def test_no_function_is_over_60_lines() -> None:
    long: dict[str, int] = {}
    for path in _modules():
        if _is_table(path):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert not long, f"split these functions: {long}"
