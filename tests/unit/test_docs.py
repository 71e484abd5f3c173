"""The manual holds: README.md as the front door, docs/ as the MkDocs site, and their examples.

The rule for code blocks (stated in docs/development.md, "The manual"), in README.md and every
docs/**/*.md:

- every ``bash``, ``sh`` or ``shell`` block parses under ``bash -n``, once each ``<placeholder>``
  (``<id>``, ``<baseline-id>``) is replaced by a plain word;
- a block whose first line is ``# runs-in-ci`` is also run (``bash -e -o pipefail``) from the
  repository root, with this Python's ``bin`` folder first on PATH and ``JOBSERVICE_VAR_DIR`` in a
  temporary folder, and must exit 0;
- every ``python`` block compiles, every ``yaml`` block loads, every ``toml`` block parses.

Also: the README stays at most 300 lines, its map names every package and module of jobservice/,
the paths it names exist, and every page is in mkdocs.yml's nav (``mkdocs build --strict`` in
scripts/test.sh checks that too, and every link and anchor; this test needs no MkDocs).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
# Written at build time: by docs/hooks/openapi_reference.py and docs/hooks/settings_reference.py.
GENERATED = {"api-reference.md", "configuration-reference.md"}
MARKER = "# runs-in-ci"
SHELLS = {"bash", "sh", "shell"}
PLACEHOLDER = re.compile(r"<[A-Za-z][\w .,'-]*>")
README_MAX_LINES = 300
# Paths the README may name in code spans: those under these folders must exist.
CHECKED_ROOTS = ("jobservice/", "workers/", "tests/", "scripts/", "deploy/", "docker/", "batches/", "docs/")


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its language and its text."""

    path: Path
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        """``file:line`` of the opening fence, for test ids and messages."""
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _blocks(path: Path) -> list[Block]:
    blocks: list[Block] = []
    body: list[str] = []
    inside, indent, lang, start = False, 0, "", 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if not inside and stripped.startswith("```"):
            inside, indent, lang, start, body = True, len(line) - len(line.lstrip()), stripped[3:], number, []
        elif inside and stripped == "```":
            blocks.append(Block(path, start, (lang.split() or [""])[0], "\n".join(body) + "\n"))
            inside = False
        elif inside:
            body.append(line[indent:] if not line[:indent].strip() else line)
    assert not inside, f"{path}: a code block opened at line {start} is never closed"
    return blocks


BLOCKS = [block for page in _pages() for block in _blocks(page)]


def _of(*langs: str) -> list[Any]:
    return [pytest.param(b, id=b.where) for b in BLOCKS if b.lang in langs]


def _runnable() -> list[Any]:
    return [pytest.param(b, id=b.where) for b in BLOCKS if b.lang in SHELLS and b.text.startswith(MARKER)]


@pytest.mark.parametrize("block", _of(*SHELLS))
def test_every_shell_example_parses(block: Block) -> None:
    text = PLACEHOLDER.sub("PLACEHOLDER", block.text)
    done = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, f"{block.where}: bash -n says\n{done.stderr}"


@pytest.mark.parametrize("block", _runnable())
def test_the_examples_marked_runs_in_ci_run(block: Block, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        "JOBSERVICE_VAR_DIR": str(tmp_path),
    }
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail"],
        input=block.text,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, (
        f"{block.where} exited {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    )


def test_some_examples_run_and_none_are_marked_wrongly() -> None:
    runnable = _runnable()
    assert runnable, f"no block starts with {MARKER!r}: the rule has nothing to run"
    stray = [b.where for b in BLOCKS if b.lang not in SHELLS and b.text.startswith(MARKER)]
    assert not stray, f"{MARKER} marks shell blocks only: {stray}"


@pytest.mark.parametrize("block", _of("python"))
def test_every_python_example_compiles(block: Block) -> None:
    compile(block.text, block.where, "exec")


@pytest.mark.parametrize("block", _of("yaml"))
def test_every_yaml_example_loads(block: Block) -> None:
    yaml.safe_load(block.text)


@pytest.mark.parametrize("block", _of("toml"))
def test_every_toml_example_parses(block: Block) -> None:
    tomllib.loads(block.text)


def test_the_readme_is_a_front_door() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move the detail to a docs/ page"
    )


def test_the_readme_map_names_every_package_and_module() -> None:
    text = README.read_text()
    section = text[text.index("\njobservice/ ") : text.index("\nworkers/ ")]  # the map's jobservice part
    entries = [
        p.name + ("/" if p.is_dir() else "")
        for p in sorted((ROOT / "jobservice").iterdir())
        if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.name != "__init__.py")
    ]
    missing = [e for e in entries if not re.search(rf"^\s+{re.escape(e)}\s", section, re.MULTILINE)]
    assert not missing, f"README's 'Where things are' names no line for: {missing}"


def test_the_paths_the_readme_names_exist() -> None:
    text = re.sub(r"```.*?```", "", README.read_text(), flags=re.DOTALL)  # code spans, not blocks
    named = {span.rstrip(".,:;") for span in re.findall(r"`([^`\s]+)`", text)}
    paths = sorted(n for n in named if n.startswith(CHECKED_ROOTS))
    assert paths, "the README names no path at all"
    gone = [p for p in paths if not list(ROOT.glob(p.rstrip("/")))]
    assert not gone, f"README.md names paths that do not exist: {gone}"


def _nav_pages(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [page for item in node for page in _nav_pages(item)]
    if isinstance(node, dict):
        return [page for value in node.values() for page in _nav_pages(value)]
    return []


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = set(_nav_pages(config["nav"]))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert not pages - nav, f"pages missing from mkdocs.yml's nav: {sorted(pages - nav)}"
    assert not nav - pages - GENERATED, f"nav entries with no page: {sorted(nav - pages - GENERATED)}"
