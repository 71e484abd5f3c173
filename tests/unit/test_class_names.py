"""One name, one thing: no two classes under jobservice/ and workers/ share a name.

Two classes of one name read as one thing in logs, tracebacks, docs and the OpenAPI components
(the fleet's card group and the job group were both ``GroupView``, and the document described one
with the other). A card group's classes say ``CardGroup``; "group" alone is a job group.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _classes() -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for package in ("jobservice", "workers"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
                if isinstance(node, ast.ClassDef):
                    found[node.name].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_two_classes_share_a_name() -> None:
    found = _classes()
    assert len(found) > 300  # the walk saw the packages
    shared = {name: where for name, where in found.items() if len(where) > 1}
    assert shared == {}


def test_the_fleets_unit_is_a_card_group_in_class_names() -> None:
    found = _classes()
    for name in ("CardGroupState", "CardGroupView", "RetiredCardGroupView"):
        assert name in found
    fleet = [n for n, where in found.items() if any(w.startswith("jobservice/fleet/") for w in where)]
    assert [n for n in fleet if "Group" in n and "CardGroup" not in n] == []
