"""The shape of the code: every module says what it is for, and so does everything it offers.

Line counts are not the measure (a module is split when it holds two responsibilities, which a
reviewer judges); what is checked here is what a newcomer reads first: a module docstring naming
its responsibility, and a docstring on every public function, class and public method of a public
class (framework hooks included: they say why they are overridden). Import rules are checked by
import-linter (scripts/test.sh); repeated code by ``duplicates`` at the end of every change.
Alembic migrations are a schema written out and are exempt.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "jobservice", ROOT / "workers"]
TABLES = ("jobservice/db/migrations/versions/",)


def _modules() -> list[Path]:
    return sorted(
        p
        for root in SOURCES
        for p in root.rglob("*.py")
        if "__pycache__" not in p.parts and not str(p.relative_to(ROOT)).startswith(TABLES)
    )


def _public(nodes: list[ast.stmt]) -> list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [n for n in nodes if isinstance(n, kinds) and not n.name.startswith("_")]


def test_every_module_says_what_it_is_for() -> None:
    missing = [
        str(p.relative_to(ROOT)) for p in _modules() if not ast.get_docstring(ast.parse(p.read_text()))
    ]
    assert not missing, f"add a module docstring naming the module's responsibility: {missing}"


def test_every_public_function_class_and_method_has_a_docstring() -> None:
    missing: list[str] = []
    for path in _modules():
        for node in _public(ast.parse(path.read_text()).body):
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if not ast.get_docstring(node):
                missing.append(f"{where} {node.name}")
            if isinstance(node, ast.ClassDef):
                missing += [
                    f"{path.relative_to(ROOT)}:{m.lineno} {node.name}.{m.name}"
                    for m in _public(node.body)
                    if not isinstance(m, ast.ClassDef) and not ast.get_docstring(m)
                ]
    assert not missing, f"say what these are for: {missing}"
